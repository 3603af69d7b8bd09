package location

import (
	"context"
	"errors"
	"fmt"

	"github.com/kopia/kopia/repo/blob"
)

// MaxBlobSize is the largest blob of a volume-data repository that Cairn reads or writes:
// 128 MiB. A read of a blob is held in memory whole (kopia's storages fill a buffer; the blob
// proxy answers with a Content-Length), so without a bound one huge object that a bucket
// writer puts under <prefix>/kopia/<namespace>/ would take the manager's memory, and every
// tenant's copies with it.
//
// Why 128 MiB: kopia refuses a repository whose packs may exceed 120 MiB (its
// maxValidPackSize), and a pack ends with the first content past that size, a content being
// at most 8 MiB with kopia's default splitter; Cairn writes 10 MiB packs, kopia and Velero 20
// MiB ones by default. Index, manifest and format blobs are smaller: a compacted index of 128
// MiB would list about four million contents (some 32 bytes each) in one namespace's
// repository. So every blob kopia writes fits with room to spare, and the bound stays a
// quarter of the manager's default memory limit (512 Mi), the pod's other users included.
const MaxBlobSize = 128 << 20

// ErrBlobTooLarge is wrapped by the error of a read of a blob over the cap: that repository's
// operation fails, naming the blob and its size, and nothing else does.
var ErrBlobTooLarge = errors.New("blob too large")

// cappedStorageType is the kopia storage type of a capped storage, in a repository's
// ConnectionInfo: kopia opens a repository again from its ConnectionInfo (internal/repository
// does, through its config file), and the storage it opens must be capped too.
const cappedStorageType = "cairn-capped"

// cappedOptions are a capped storage's ConnectionInfo: the cap and the storage it bounds.
type cappedOptions struct {
	MaxBlobSize int64               `json:"maxBlobSize"`
	Storage     blob.ConnectionInfo `json:"storage"`
}

func init() {
	blob.AddSupportedStorage(cappedStorageType, cappedOptions{}, newCappedStorage)
}

// newCappedStorage is kopia's constructor of cappedStorageType.
func newCappedStorage(ctx context.Context, opt *cappedOptions, isCreate bool) (blob.Storage, error) {
	if opt.MaxBlobSize <= 0 {
		return nil, fmt.Errorf("a capped storage needs a cap above 0, not %d", opt.MaxBlobSize)
	}
	st, err := blob.NewStorage(ctx, opt.Storage, isCreate)
	if err != nil {
		return nil, err
	}
	return capReads(st, opt.MaxBlobSize), nil
}

// capReads returns st with every read bounded by maxSize bytes. A whole-blob read first asks
// the blob's size, and refuses a blob over the cap before anything is read; a ranged read over
// the cap is refused as asked; and every read stops at the cap whatever the storage reports,
// in case the size lies (or the blob grew after it was asked).
func capReads(st blob.Storage, maxSize int64) blob.Storage {
	return &cappedStorage{Storage: st, max: maxSize}
}

type cappedStorage struct {
	blob.Storage
	max int64
}

// GetBlob implements blob.Storage.
func (s *cappedStorage) GetBlob(ctx context.Context, id blob.ID, offset, length int64, output blob.OutputBuffer) error {
	if length > s.max {
		return fmt.Errorf("%w: a read of %d bytes of blob %s is more than the %d bytes a volume repository's blob may have", ErrBlobTooLarge, length, id, s.max)
	}
	if length < 0 {
		md, err := s.GetMetadata(ctx, id)
		if err != nil {
			return err
		}
		if md.Length > s.max {
			return blobTooLarge(id, md.Length, s.max)
		}
	}
	return s.Storage.GetBlob(ctx, id, offset, length, &cappedOutput{OutputBuffer: output, id: id, max: s.max})
}

// ConnectionInfo implements blob.Storage: a storage opened from it is capped the same.
func (s *cappedStorage) ConnectionInfo() blob.ConnectionInfo {
	return blob.ConnectionInfo{Type: cappedStorageType, Config: &cappedOptions{MaxBlobSize: s.max, Storage: s.Storage.ConnectionInfo()}}
}

// blobTooLarge is the error of a blob of size bytes, over maxSize.
func blobTooLarge(id blob.ID, size, maxSize int64) error {
	return fmt.Errorf("%w: blob %s has %d bytes, more than the %d a volume repository's blob may have: "+
		"it was not read (kopia writes none that large; an object put in the repository's directory by something else?)",
		ErrBlobTooLarge, id, size, maxSize)
}

// cappedOutput refuses the bytes of a read past max: it is the "limit + 1" of a read whose
// size was checked before, in case the storage's answer was not true.
type cappedOutput struct {
	blob.OutputBuffer
	id      blob.ID
	max     int64
	written int64
}

func (o *cappedOutput) Write(p []byte) (int, error) {
	if o.written+int64(len(p)) > o.max {
		return 0, fmt.Errorf("%w: blob %s has more than %d bytes, more than a volume repository's blob may have: the read was stopped there",
			ErrBlobTooLarge, o.id, o.max)
	}
	n, err := o.OutputBuffer.Write(p)
	o.written += int64(n)
	return n, err
}

func (o *cappedOutput) Reset() {
	o.written = 0
	o.OutputBuffer.Reset()
}
