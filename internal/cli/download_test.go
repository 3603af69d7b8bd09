package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// serveDownloads makes e's fake API server play the manager for DownloadRequests: each is
// answered at once with the URL of a test server that handler serves. objs are the other
// objects the API server holds.
func serveDownloads(t *testing.T, e *env, handler http.HandlerFunc, objs ...client.Object) {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if dr, ok := obj.(*cairnv1.DownloadRequest); ok {
					dr.Status = cairnv1.DownloadRequestStatus{Phase: cairnv1.DownloadRequestPhaseProcessed, DownloadURL: srv.URL + "/" + string(dr.Spec.Target.Kind)}
				}
				return c.Create(ctx, obj, opts...)
			},
		}).Build()
	e.newClient = func() (client.WithWatch, error) { return c, nil }
}

// archive is what the test server sends as a backup's archive, and the backup that records
// its checksum.
var archive = bytes.Repeat([]byte("secret data "), 100_000)

func backupOfArchive() *cairnv1.Backup {
	sum := sha256.Sum256(archive)
	return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "b1"},
		Status: cairnv1.BackupStatus{Phase: cairnv1.BackupPhaseCompleted, ArchiveSHA256: hex.EncodeToString(sum[:])}}
}

// sendHalfThen sends the first half of the archive, then calls then and waits for the client
// to hang up; a client that has not after a while (one that would hang for ever) gets the
// rest, so that the test fails rather than hangs.
func sendHalfThen(then func()) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(archive[:len(archive)/2])
		w.(http.Flusher).Flush()
		then()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
			_, _ = w.Write(archive[len(archive)/2:])
		}
	}
}

// nothingLeft fails t when dir holds any file: neither the archive nor a partial temp file.
func nothingLeft(t *testing.T, dir string) {
	t.Helper()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the download left files behind: %v", entries)
	}
}

func TestDownloadSavesTheVerifiedArchive(t *testing.T) {
	e, out, errOut := testEnv(t)
	serveDownloads(t, e, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(archive) }, backupOfArchive())
	path := filepath.Join(t.TempDir(), "b1.tar.gz")
	if got := run(e, "backup", "download", "b1", "-o", path); got != ExitOK {
		t.Fatalf("exit %d, stderr %s", got, errOut)
	}
	if data, _ := os.ReadFile(path); !bytes.Equal(data, archive) || !strings.Contains(out.String(), "matches the backup's") {
		t.Errorf("saved %d bytes, output %q", len(data), out)
	}
}

// A body that stops arriving fails the download after the idle timeout, and the partial file
// is removed.
func TestDownloadFailsWhenTheBodyStalls(t *testing.T) {
	e, _, errOut := testEnv(t)
	e.idleTimeout = 200 * time.Millisecond
	serveDownloads(t, e, sendHalfThen(func() {}), backupOfArchive())
	dir := t.TempDir()
	if got := run(e, "backup", "download", "b1", "-o", filepath.Join(dir, "b1.tar.gz")); got != ExitError ||
		!strings.Contains(errOut.String(), "the transfer stalled: no data came for 200ms") {
		t.Errorf("exit %d, stderr %q; want the stalled transfer said", got, errOut)
	}
	nothingLeft(t, dir)
}

// Ctrl-C during a download ends it and removes the partial file (which holds Secrets): the
// command catches the signal rather than dying with the file in place.
func TestDownloadInterruptedLeavesNothing(t *testing.T) {
	e, _, errOut := testEnv(t)
	var ctrlC context.CancelFunc = func() {}
	e.interrupt = func(ctx context.Context) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(ctx)
		ctrlC = cancel
		return ctx, cancel
	}
	// Ctrl-C once the first bytes are in the file.
	e.httpClient = &http.Client{Transport: onFirstRead{http.DefaultTransport, func() { ctrlC() }}}
	serveDownloads(t, e, sendHalfThen(func() {}), backupOfArchive())
	dir := t.TempDir()
	if got := run(e, "backup", "download", "b1", "-o", filepath.Join(dir, "b1.tar.gz")); got != ExitError ||
		!strings.Contains(errOut.String(), "the download of backup b1 was interrupted; nothing was saved") {
		t.Errorf("exit %d, stderr %q; want the interruption said", got, errOut)
	}
	nothingLeft(t, dir)
}

// onFirstRead is a transport whose response bodies call then after their first Read.
type onFirstRead struct {
	http.RoundTripper
	then func()
}

func (t onFirstRead) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(req)
	if err == nil {
		resp.Body = &firstReadBody{ReadCloser: resp.Body, then: t.then}
	}
	return resp, err
}

type firstReadBody struct {
	io.ReadCloser
	then func()
	once sync.Once
}

func (b *firstReadBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.once.Do(b.then)
	}
	return n, err
}

// A server that accepts the connection but never answers fails the request after the header
// timeout; the CLI's client has one.
func TestOpenFailsWhenTheServerDoesNotAnswer(t *testing.T) {
	e, _, _ := testEnv(t)
	if tr, ok := e.httpClient.Transport.(*http.Transport); !ok || tr.ResponseHeaderTimeout != downloadHeaderTimeout {
		t.Errorf("the download client's transport = %#v, want one with a %s header timeout", e.httpClient.Transport, downloadHeaderTimeout)
	}
	e.httpClient = newHTTPClient(200 * time.Millisecond)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	if _, err := e.open(context.Background(), srv.URL); err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Errorf("open = %v, want a header timeout", err)
	}
}

// A results file that decompresses to more than describe reads into memory is refused with
// an error that says so, not read to the end.
func TestReadJSONRefusesAHugeFile(t *testing.T) {
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	_, _ = zw.Write([]byte("["))
	_, _ = zw.Write(make([]byte, maxJSONFileSize))
	_ = zw.Close()
	e, _, _ := testEnv(t)
	serveDownloads(t, e, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(bomb.Bytes()) })
	var v []any
	err := e.readJSON(context.Background(), "team-a", "b1", cairnv1.DownloadTargetBackupResults, &v)
	if !errors.Is(err, errTooLarge) || !strings.Contains(err.Error(), "larger than 64 MiB uncompressed") {
		t.Errorf("readJSON = %v, want it refused as too large", err)
	}
}
