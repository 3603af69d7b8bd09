package backup

import (
	"bytes"
	"compress/gzip"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"
)

// Log is a backup's own log: logrus, gzipped into memory, with a hook that counts warnings and
// errors (the counts decide PartiallyFailed vs Completed).
type Log struct {
	*logrus.Logger
	mu       sync.Mutex
	buf      bytes.Buffer
	gz       *gzip.Writer
	warnings atomic.Int32
	errors   atomic.Int32
}

// NewLog returns an empty log.
func NewLog() *Log {
	l := &Log{Logger: logrus.New()}
	l.gz = gzip.NewWriter(&l.buf)
	l.SetOutput(lockedWriter{l})
	l.SetFormatter(&logrus.JSONFormatter{})
	l.SetLevel(logrus.InfoLevel)
	l.AddHook(countingHook{l})
	return l
}

// Counts returns the warnings and errors logged so far.
func (l *Log) Counts() (warnings, errors int32) { return l.warnings.Load(), l.errors.Load() }

// Gzipped returns the log so far as a complete gzip stream, and keeps it open for more.
func (l *Log) Gzipped() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Finish the current gzip member and start a new one: gzip readers read concatenated
	// members as one stream, so every snapshot is a complete, readable log.
	if err := l.gz.Close(); err != nil {
		return nil, err
	}
	out := append([]byte(nil), l.buf.Bytes()...)
	l.gz = gzip.NewWriter(&l.buf)
	return out, nil
}

type lockedWriter struct{ l *Log }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.gz.Write(p)
}

type countingHook struct{ l *Log }

func (countingHook) Levels() []logrus.Level {
	return []logrus.Level{logrus.WarnLevel, logrus.ErrorLevel, logrus.FatalLevel, logrus.PanicLevel}
}

func (h countingHook) Fire(e *logrus.Entry) error {
	if e.Level == logrus.WarnLevel {
		h.l.warnings.Add(1)
	} else {
		h.l.errors.Add(1)
	}
	return nil
}

// AppendLog returns a stored log (gzipped; nil when there is none) with what write logs
// appended as one more gzip member, which gzip readers read as the same stream.
func AppendLog(stored []byte, write func(l *Log)) ([]byte, error) {
	l := NewLog()
	write(l)
	more, err := l.Gzipped()
	if err != nil {
		return nil, err
	}
	return append(append([]byte(nil), stored...), more...), nil
}
