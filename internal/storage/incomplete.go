package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// UploadAborter is implemented by stores whose interrupted writes can leave something behind
// that List does not show: the s3 provider's incomplete multipart uploads (whose parts the
// bucket keeps, and bills, until they are aborted) and the filesystem provider's temp files.
// A Put that fails in a running manager cleans up after itself; a manager that is killed
// during a Put cannot, which is what this is for.
type UploadAborter interface {
	// AbortIncompleteUploads removes every incomplete upload of a key under prefix and says
	// how many it removed. A Put still running under prefix fails. Call it only where nothing
	// should be writing, such as a backup's directory (BackupKeys.Dir) once the backup ended.
	AbortIncompleteUploads(ctx context.Context, prefix string) (int, error)
}

// AbortIncompleteUploads removes the incomplete uploads under prefix when s keeps any
// (UploadAborter); for any other store it removes nothing. A ReadOnly location's store fails
// with ErrReadOnly, as a Delete would.
func AbortIncompleteUploads(ctx context.Context, s ObjectStore, prefix string) (int, error) {
	a, ok := s.(UploadAborter)
	if !ok {
		return 0, nil
	}
	return a.AbortIncompleteUploads(ctx, prefix)
}

// AbortIncompleteUploads implements UploadAborter: a ReadOnly location removes nothing.
func (readOnlyStore) AbortIncompleteUploads(_ context.Context, prefix string) (int, error) {
	return 0, fmt.Errorf("aborting incomplete uploads under %s: %w", prefix, ErrReadOnly)
}

// AbortIncompleteUploads implements UploadAborter: it aborts the multipart uploads under
// prefix that were never completed (a manager killed during an archive upload leaves one).
func (s *S3) AbortIncompleteUploads(ctx context.Context, prefix string) (int, error) {
	aborted := 0
	p := s3.NewListMultipartUploadsPaginator(s.client, &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return aborted, fmt.Errorf("listing incomplete uploads under %q in bucket %s: %w", prefix, s.bucket, err)
		}
		for _, u := range page.Uploads {
			_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: u.Key, UploadId: u.UploadId})
			if err != nil && !isNotFound(err) {
				return aborted, fmt.Errorf("aborting the incomplete upload of %s in bucket %s: %w", aws.ToString(u.Key), s.bucket, err)
			}
			aborted++
		}
	}
	return aborted, nil
}

// AbortIncompleteUploads implements UploadAborter: it removes the temp files under prefix
// that Puts never renamed into place (a manager killed during a Put leaves one).
func (f *Filesystem) AbortIncompleteUploads(_ context.Context, prefix string) (int, error) {
	dir, err := f.path(strings.TrimSuffix(prefix, "/"))
	if err != nil {
		return 0, err
	}
	root, err := f.open()
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer root.Close()
	removed := 0
	err = fs.WalkDir(root.FS(), filepath.ToSlash(dir), func(p string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case d.IsDir() || !strings.HasPrefix(d.Name(), tempPrefix):
			return nil
		}
		if err := root.Remove(filepath.FromSlash(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed++
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("removing incomplete uploads under %s: %w", prefix, err)
	}
	return removed, nil
}
