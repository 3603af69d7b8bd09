package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/cairn-backup/cairn/internal/archive"
)

// ErrArchiveUnreadable means a stored archive has the bytes that were uploaded, but they are
// not a gzip-compressed tar that reads to its end: what was written was already broken.
var ErrArchiveUnreadable = errors.New("archive is not a readable tar.gz")

// VerifyArchive reads the archive at key back from the store and checks that it is what was
// uploaded (want, the digest PutArchive computed on the way) and a gzip-compressed tar that
// reads to its end. Call it before writing the commit marker, so that no backup is committed
// over an archive that cannot be restored. Its errors are ReadArchive's.
func VerifyArchive(ctx context.Context, s ObjectStore, key string, want ArchiveDigest, opts ...TransferOption) error {
	return ReadArchive(ctx, s, key, want, nil, opts...)
}

// ReadArchive reads the archive at key, calls each (when not nil) with every entry in order,
// and checks that the archive's bytes are want (a commit marker's or an upload's digest) and a
// gzip-compressed tar that reads to its end. The entries each sees are not verified yet: trust
// nothing it kept until ReadArchive returns nil.
//
// A want that is Unverified (no digest was recorded: a Velero backup) skips the checksum and
// the size: the archive is still read to its end, every entry within the cap, and a stream
// that is not a readable gzip-compressed tar is ErrArchiveUnreadable.
//
// The archive is untrusted input (whoever can write the bucket can write it, and its marker):
// the read stops as soon as the stored bytes pass want.Size, and an entry larger than the cap
// (WithMaxEntrySize; archive.DefaultMaxEntrySize) is refused by its tar header before it is
// read. What the read holds in memory is one entry, whatever the archive decompresses to. Its
// errors:
//   - ErrChecksumMismatch: the stored bytes differ from want (corrupted or truncated in
//     storage, rewritten, or longer than want.Size);
//   - ErrArchiveUnreadable: the bytes are want's, but they are not a readable tar.gz, or an
//     entry is over the cap (wrapping archive.ErrEntryTooLarge);
//   - ErrNotFound: there is no archive;
//   - an error each returned, as it is (the rest of the archive is still read, up to want.Size,
//     so that the checksum is checked first: a mismatch wins);
//   - anything else (ErrStalled, the context's, the store's) is a failure to read, which may
//     pass: nothing is known about the archive.
//
// The read has the same idle-progress timeout as PutArchive (opts), so a large archive may
// take as long as it needs while a stalled read fails.
func ReadArchive(ctx context.Context, s ObjectStore, key string, want ArchiveDigest, each func(archive.Entry) error, opts ...TransferOption) error {
	o := newTransferOptions(opts)
	w, stop := watchIdle(ctx, o, "reading "+key, nil)
	defer stop()
	rc, err := s.Get(w.ctx, key)
	if err != nil {
		return w.err(err)
	}
	defer rc.Close()

	src := &sourceReader{r: contextReader{w.ctx, w.reader(rc)}}
	h := sha256.New()
	limit := want.Size
	if want.Unverified {
		limit = math.MaxInt64 - 1
	}
	cr := &cutOffReader{r: io.TeeReader(src, h), limit: limit}
	var eachErr error
	formatErr := archive.EachMax(cr, o.maxEntrySize, func(e archive.Entry) error {
		if each == nil {
			return nil
		}
		if err := each(e); err != nil {
			eachErr = err
			return err
		}
		return nil
	})
	// Whatever the tar reader left (the gzip trailer, or everything after a format error) still
	// counts for the digest, up to the size recorded.
	if _, err := io.Copy(io.Discard, cr); err != nil && src.err == nil && !cr.over {
		src.err = err
	}
	if cr.over {
		return fmt.Errorf("%s: %w: the stored archive is longer than the %d bytes recorded; reading stopped there",
			key, ErrChecksumMismatch, want.Size)
	}
	if src.err != nil {
		return fmt.Errorf("reading %s: %w", key, w.err(src.err))
	}
	if got := hex.EncodeToString(h.Sum(nil)); !want.Unverified && (got != want.SHA256 || cr.n != want.Size) {
		return fmt.Errorf("%s: %w: stored sha256 %s (%d bytes), expected %s (%d bytes)",
			key, ErrChecksumMismatch, got, cr.n, want.SHA256, want.Size)
	}
	if eachErr != nil {
		return eachErr
	}
	if formatErr != nil {
		return fmt.Errorf("%s: %w: %w", key, ErrArchiveUnreadable, formatErr)
	}
	return nil
}

// errPastRecordedSize ends a read that passed the size its digest recorded.
var errPastRecordedSize = errors.New("the stream is longer than the size recorded")

// cutOffReader counts what it reads and fails as soon as the count passes limit: a stream
// longer than its commit marker says is never read further, whatever it holds.
type cutOffReader struct {
	r     io.Reader
	n     int64
	limit int64
	over  bool
}

func (c *cutOffReader) Read(p []byte) (int, error) {
	if c.over {
		return 0, errPastRecordedSize
	}
	// One byte more than the limit tells a stream of exactly limit bytes from a longer one.
	if room := c.limit + 1 - c.n; int64(len(p)) > room {
		p = p[:max(room, 0)]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		c.over = true
		c.n = c.limit
		return max(n-1, 0), errPastRecordedSize
	}
	return n, err
}

// sourceReader remembers the first error of the store's reader other than io.EOF, so that a
// failure to read is never taken for a broken archive.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && s.err == nil {
		s.err = err
	}
	return n, err
}
