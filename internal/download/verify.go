package download

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrMismatch is the error of a download whose bytes are not the ones its URL's digest names
// (the commit marker's): the object was changed, cut or replaced in storage.
var ErrMismatch = errors.New("the file does not match the digest its backup's commit marker records")

// copyBufferSize is what the server reads from storage at once, and so at most what it holds
// back of a verified download until it has checked the digest.
const copyBufferSize = 64 << 10

// copyVerified copies r to w and checks, when want is not nil, that r's bytes are want's: the
// bytes of the last read are held back until r's end, and written only when the SHA-256 and
// the size match, so a download that does not match ends before its last bytes, however it
// differs. A stream longer than want.Size fails as soon as it passes it; nothing past it is read.
// Without want, r is copied as it is. An error of r or of w is returned as it is.
func copyVerified(w io.Writer, r io.Reader, want *Digest) error {
	if want == nil {
		_, err := io.CopyBuffer(w, r, make([]byte, copyBufferSize))
		return err
	}
	h := sha256.New()
	src := io.LimitReader(r, want.Size+1)
	buf, held := make([]byte, copyBufferSize), make([]byte, 0, copyBufferSize)
	var n int64
	for {
		m, err := src.Read(buf)
		if m > 0 {
			n += int64(m)
			if n > want.Size {
				return fmt.Errorf("%w: it is longer than the %d bytes recorded", ErrMismatch, want.Size)
			}
			h.Write(buf[:m])
			// An empty write would still send an HTTP response's headers.
			if len(held) > 0 {
				if _, werr := w.Write(held); werr != nil {
					return werr
				}
			}
			held = append(held[:0], buf[:m]...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if problem := digestMismatch(*want, hex.EncodeToString(h.Sum(nil)), n); problem != "" {
		return fmt.Errorf("%w: %s", ErrMismatch, problem)
	}
	_, err := w.Write(held)
	return err
}

// digestMismatch says how bytes of SHA-256 got (hex) and size n differ from want ("" when
// they do not).
func digestMismatch(want Digest, got string, n int64) string {
	switch {
	case n != want.Size:
		return fmt.Sprintf("it has %d bytes, %d are recorded", n, want.Size)
	case subtle.ConstantTimeCompare([]byte(strings.ToLower(want.SHA256)), []byte(got)) != 1:
		return fmt.Sprintf("its SHA-256 is %s, %s is recorded", got, want.SHA256)
	}
	return ""
}
