package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
)

// DefaultMaxFileSize caps what a compressed side object of a backup or restore (its
// operations, results, resource list) may decompress to when the manager reads it. These
// objects come from storage, which whoever can write the bucket controls; the largest Cairn
// writes (the operations of a backup of thousands of snapshotted claims, about 600 bytes each)
// stay far below it, and a JSON decoder holds at most about twice the cap.
const DefaultMaxFileSize int64 = 16 << 20

// ErrFileTooLarge means an object read from storage is larger than its reader's cap.
var ErrFileTooLarge = errors.New("larger than the cap")

// DecodeGzipJSON decodes the gzip-compressed JSON value of the object key, read from r, into
// v. It reads at most maxSize decompressed bytes (DefaultMaxFileSize when 0 or less): a larger
// object is refused with ErrFileTooLarge naming key and the cap, before more is read, so a
// small compressed object that expands without end (a gzip bomb) cannot make memory grow.
func DecodeGzipJSON(r io.Reader, key string, maxSize int64, v any) error {
	if maxSize <= 0 {
		maxSize = DefaultMaxFileSize
	}
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%s: not gzip: %w", key, err)
	}
	defer gz.Close()
	lr := &capReader{r: gz, left: maxSize}
	dec := json.NewDecoder(lr)
	err = dec.Decode(v)
	if err == nil {
		// One value, and nothing after it but white space, all within the cap.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = fmt.Errorf("more after the JSON value (%w)", terr)
		}
	}
	switch {
	case lr.over:
		return fmt.Errorf("%s: %w: it decompresses to more than %d bytes", key, ErrFileTooLarge, maxSize)
	case err != nil:
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// capReader reads at most left bytes, and then fails, remembering that there was more.
type capReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// Only a Read that gets a byte tells "exactly the cap" from "more".
		var one [1]byte
		if n, _ := io.ReadFull(c.r, one[:]); n > 0 {
			c.over = true
			return 0, ErrFileTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
