package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/utils/clock"
)

// DefaultIdleTimeout is how long an archive transfer may make no progress before it fails:
// a large upload that keeps moving takes as long as it needs, a stalled one ends.
const DefaultIdleTimeout = 2 * time.Minute

// ErrStalled is returned (wrapped) by an archive transfer that moved no bytes for its idle
// timeout: the store stopped reading, or the writer stopped producing.
var ErrStalled = errors.New("the transfer stalled")

// TransferOption changes how PutArchive and VerifyArchive move an archive.
type TransferOption func(*transferOptions)

type transferOptions struct {
	idleTimeout  time.Duration
	clock        clock.WithDelayedExecution
	maxEntrySize int64
}

// WithIdleTimeout sets the idle-progress timeout (DefaultIdleTimeout when not given); 0 or
// less turns it off.
func WithIdleTimeout(d time.Duration) TransferOption {
	return func(o *transferOptions) { o.idleTimeout = d }
}

// WithMaxEntrySize sets the largest archive entry ReadArchive and VerifyArchive accept
// (archive.DefaultMaxEntrySize when not given, or 0 or less): the manager's
// --max-archive-entry-size.
func WithMaxEntrySize(n int64) TransferOption {
	return func(o *transferOptions) { o.maxEntrySize = n }
}

func newTransferOptions(opts []TransferOption) transferOptions {
	o := transferOptions{idleTimeout: DefaultIdleTimeout, clock: clock.RealClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// idleWatch fails a transfer that makes no progress for a while. Progress is a Read of a
// watched reader that returns bytes: when the store stops reading, or the writer stops
// producing, no Read returns any. A stall cancels the transfer's context (so the store's
// requests end) and calls the transfer's unblock function, which can close the source so that
// a Read blocked on a silent writer returns too.
type idleWatch struct {
	// ctx is the context the transfer must use.
	ctx     context.Context
	timer   clock.Timer
	timeout time.Duration
	stall   error
}

// watchIdle starts the watch of a transfer named by what (such as "uploading KEY"). unblock,
// when not nil, is called on a stall. Call stop when the transfer ends. With
// o.idleTimeout <= 0 it watches nothing.
func watchIdle(ctx context.Context, o transferOptions, what string, unblock func(error)) (w *idleWatch, stop func()) {
	w = &idleWatch{ctx: ctx, timeout: o.idleTimeout}
	if o.idleTimeout <= 0 {
		return w, func() {}
	}
	w.stall = fmt.Errorf("%s: %w: no bytes moved for %s", what, ErrStalled, o.idleTimeout)
	ctx, cancel := context.WithCancelCause(ctx)
	w.ctx = ctx
	// The callback must not use the clock: a fake clock runs it while holding its lock.
	w.timer = o.clock.AfterFunc(o.idleTimeout, func() {
		cancel(w.stall)
		if unblock != nil {
			unblock(w.stall)
		}
	})
	return w, func() {
		w.timer.Stop()
		cancel(nil)
	}
}

// reader returns r, counting each Read that returns bytes as progress.
func (w *idleWatch) reader(r io.Reader) io.Reader {
	if w.timer == nil {
		return r
	}
	return progressReader{w: w, r: r}
}

// err is the transfer's error: the stall when the watch fired (whatever error the stall
// caused in the store), else err.
func (w *idleWatch) err(err error) error {
	if err != nil && w.stall != nil && errors.Is(context.Cause(w.ctx), ErrStalled) {
		return w.stall
	}
	return err
}

type progressReader struct {
	w *idleWatch
	r io.Reader
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.w.timer.Reset(p.w.timeout)
	}
	return n, err
}

// closerWithError is the unblock function of a reader that can be closed with an error (an
// io.PipeReader); nil for any other.
func closerWithError(r io.Reader) func(error) {
	if c, ok := r.(interface{ CloseWithError(error) error }); ok {
		return func(err error) { _ = c.CloseWithError(err) }
	}
	return nil
}
