package storage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gcs "cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// recordingProxy is a reverse proxy on 127.0.0.1 in front of an emulator: it records every
// request, answers those answer says it answers, and lets modify change the emulator's answers.
type recordingProxy struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
}

func startRecordingProxy(t *testing.T, target string, answer func(w http.ResponseWriter, r *http.Request) bool, modify func(*http.Response) error) *recordingProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.ModifyResponse = modify
	p := &recordingProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests = append(p.requests, r.Clone(context.Background()))
		p.mu.Unlock()
		if answer != nil && answer(w, r) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// recorded is the requests for which match is true.
func (p *recordingProxy) recorded(match func(*http.Request) bool) []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*http.Request
	for _, r := range p.requests {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

func newVersionedAzure(t *testing.T, a *emulator.Azurite, endpoint, container string) *storage.Azure {
	t.Helper()
	s, err := storage.NewAzure(storage.AzureConfig{Account: a.Account, Container: container, Endpoint: endpoint,
		Credentials: storage.AzureCredentials{SharedKey: a.Key}, PartSize: 1 << 20, Versioned: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// What Azurite enforces of a locked location: nothing of immutability (it has no version-level
// immutability support and does not implement immutability policies), so the lock is
// Unavailable on it, saying what is missing, and a Retain on it fails rather than pretends.
func TestAzureObjectLockOnAzurite(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("locked")
	ctx := context.Background()
	store := newVersionedAzure(t, a, a.Endpoint(), "locked")
	lock := store.ObjectLock(storage.LockCompliance, time.Hour)
	err := lock.Validate(ctx)
	if err == nil || !strings.Contains(err.Error(), `container "locked" at `+a.Endpoint()+` does not have version-level immutability support`) {
		t.Fatalf("Validate on Azurite = %v", err)
	}
	key := "backups/ns/b/b.tar.gz"
	mustPut(t, store, key, "the archive")
	err = lock.Retain(ctx, []string{key}, time.Now().Add(time.Hour))
	if err == nil || !strings.Contains(err.Error(), "the service does not implement immutability policies (APINotImplemented") {
		t.Fatalf("Retain on Azurite = %v", err)
	}
	if err := lock.Retained(ctx, []string{key, "backups/ns/b/none"}, time.Now()); err != nil {
		t.Fatalf("Retained of a blob without a policy, and of a missing one: %v", err)
	}
	if err := store.Delete(ctx, key); err != nil {
		t.Fatalf("Delete of a versioned store: %v", err)
	}
	if ok, err := store.Exists(ctx, key); ok || err != nil {
		t.Fatalf("after Delete: exists %v, %v", ok, err)
	}
}

// azurePolicies stands, in a proxy in front of Azurite, for what Azurite does not implement:
// a container with version-level immutability support, and each blob's immutability policy,
// set by Set Blob Immutability Policy and shown in the blob's properties and in listings.
type azurePolicies struct {
	mu       sync.Mutex
	policies map[string][2]string // blob name -> until (RFC 1123), mode
}

func isPolicyRequest(r *http.Request) bool {
	return r.URL.Query().Get("comp") == "immutabilityPolicies"
}

// blobName is the name of the blob a request's path names, in container.
func blobName(path, container string) string {
	_, name, _ := strings.Cut(path, "/"+container+"/")
	return name
}

func (p *azurePolicies) answer(w http.ResponseWriter, r *http.Request) bool {
	if !isPolicyRequest(r) {
		return false
	}
	until, mode := r.Header.Get("x-ms-immutability-policy-until-date"), r.Header.Get("x-ms-immutability-policy-mode")
	p.mu.Lock()
	p.policies[blobName(r.URL.Path, "locked")] = [2]string{until, mode}
	p.mu.Unlock()
	w.Header().Set("x-ms-immutability-policy-until-date", until)
	w.Header().Set("x-ms-immutability-policy-mode", mode)
	w.WriteHeader(http.StatusOK)
	return true
}

func (p *azurePolicies) modify(resp *http.Response) error {
	q := resp.Request.URL.Query()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case q.Get("restype") == "container" && q.Get("comp") == "" && resp.StatusCode == http.StatusOK:
		resp.Header.Set("x-ms-immutable-storage-with-versioning-enabled", "true")
	case resp.Request.Method == http.MethodHead:
		if policy, ok := p.policies[blobName(resp.Request.URL.Path, "locked")]; ok {
			resp.Header.Set("x-ms-immutability-policy-until-date", policy[0])
			resp.Header.Set("x-ms-immutability-policy-mode", policy[1])
		}
	case q.Get("comp") == "list" && strings.Contains(q.Get("include"), "immutabilitypolicy"):
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		listing := string(body)
		for name, policy := range p.policies {
			at := strings.Index(listing, "<Name>"+name+"</Name>")
			props := strings.Index(listing[max(at, 0):], "<Properties>")
			if at < 0 || props < 0 {
				continue
			}
			at += props + len("<Properties>")
			listing = listing[:at] + "<ImmutabilityPolicyUntilDate>" + policy[0] + "</ImmutabilityPolicyUntilDate><ImmutabilityPolicyMode>" +
				policy[1] + "</ImmutabilityPolicyMode>" + listing[at:]
		}
		resp.Body = io.NopCloser(strings.NewReader(listing))
		resp.ContentLength = int64(len(listing))
		resp.Header.Set("Content-Length", strconv.Itoa(len(listing)))
	}
	return nil
}

// The requests the SDK sends to lock a blob and what Cairn reads back, through a proxy in
// front of Azurite standing for what it does not implement (azurePolicies).
func TestAzureObjectLockRequests(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("locked")
	policies := &azurePolicies{policies: map[string][2]string{}}
	proxy := startRecordingProxy(t, a.Endpoint(), policies.answer, policies.modify) //nolint:bodyclose // a ModifyResponse hook: the proxy closes the body
	ctx := context.Background()
	endpoint := proxy.URL + "/" + a.Account
	for _, tt := range []struct {
		mode     storage.LockMode
		wantMode string
	}{{storage.LockGovernance, "Unlocked"}, {storage.LockCompliance, "Locked"}} {
		t.Run(string(tt.mode), func(t *testing.T) {
			store := newVersionedAzure(t, a, endpoint, "locked")
			lock := store.ObjectLock(tt.mode, time.Hour)
			if err := lock.Validate(ctx); err != nil {
				t.Fatalf("Validate, the container saying it has version-level immutability support: %v", err)
			}
			key := "backups/ns/" + strings.ToLower(string(tt.mode)) + "/b.tar.gz"
			mustPut(t, store, key, "the archive")
			until := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
			if err := lock.Retain(ctx, []string{key}, until); err != nil {
				t.Fatal(err)
			}
			onKey := func(r *http.Request) bool { return isPolicyRequest(r) && strings.HasSuffix(r.URL.Path, "/locked/"+key) }
			sent := proxy.recorded(onKey)
			if len(sent) != 1 || sent[0].Method != http.MethodPut ||
				sent[0].Header.Get("x-ms-immutability-policy-until-date") != "Wed, 02 Jan 2030 03:04:05 GMT" ||
				sent[0].Header.Get("x-ms-immutability-policy-mode") != tt.wantMode {
				t.Fatalf("requests %v, want one PUT ?comp=immutabilityPolicies until Wed, 02 Jan 2030 03:04:05 GMT, %s", describe(sent), tt.wantMode)
			}
			// Retained already as long: nothing is sent; longer: the policy is extended.
			if err := lock.Retain(ctx, []string{key}, until.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
			if err := lock.Retain(ctx, []string{key}, until.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			sent = proxy.recorded(onKey)
			if len(sent) != 2 || sent[1].Header.Get("x-ms-immutability-policy-until-date") != "Wed, 02 Jan 2030 04:04:05 GMT" {
				t.Fatalf("requests %v, want a second one, extending the date only", describe(sent))
			}
			// The deletion's check reads the policy from the listing of the blob's versions.
			err := lock.Retained(ctx, []string{key}, time.Now())
			if got, ok := storage.RetainedUntil(err); !ok || !got.Equal(until.Add(time.Hour)) || !strings.Contains(err.Error(), "(Azure immutability policy, "+tt.wantMode+")") {
				t.Fatalf("Retained = %v, want until %s by an %s policy", err, until.Add(time.Hour), tt.wantMode)
			}
		})
	}
}

func describe(reqs []*http.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Method+" "+r.URL.String()+" until="+r.Header.Get("x-ms-immutability-policy-until-date")+" mode="+r.Header.Get("x-ms-immutability-policy-mode"))
	}
	return out
}

// What fake-gcs-server enforces of a locked location: it keeps an object's retention, answers
// it back, and refuses to change a Locked one; it does not say a bucket has object retention
// (a proxy in front of it adds that to the bucket's attributes) and does not refuse deleting
// a retained object (docs/storage.md).
func TestGCSObjectLockOnFakeGCS(t *testing.T) {
	server := startGCS(t)
	server.CreateBucket("locked")
	ctx := context.Background()
	plain := newGCS(t, server, "locked").ObjectLock(storage.LockCompliance, time.Hour)
	if err := plain.Validate(ctx); err == nil || !strings.Contains(err.Error(), `bucket "locked" at `+server.Endpoint()+` does not have object retention enabled`) {
		t.Fatalf("Validate on fake-gcs-server = %v", err)
	}
	proxy := startRecordingProxy(t, server.Endpoint(), nil, retentionEnabled("locked")) //nolint:bodyclose // a ModifyResponse hook: the proxy closes the body
	store, err := storage.NewGCS(storage.GCSConfig{Bucket: "locked", Endpoint: proxy.URL, Credentials: storage.GCSCredentials{JSON: server.key}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := gcs.NewClient(ctx, gcsRawOptions(server.Endpoint())...)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []storage.LockMode{storage.LockGovernance, storage.LockCompliance} {
		t.Run(string(mode), func(t *testing.T) {
			lock := store.ObjectLock(mode, time.Second)
			if err := lock.Validate(ctx); err != nil {
				t.Fatalf("Validate, the bucket saying it has object retention: %v", err)
			}
			key := "backups/ns/" + strings.ToLower(string(mode)) + "/b.tar.gz"
			mustPut(t, store, key, "the archive")
			if err := lock.Retained(ctx, []string{key}, time.Now()); err != nil {
				t.Fatalf("an object not locked yet: %v", err)
			}
			until := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
			if err := lock.Retain(ctx, []string{key}, until); err != nil {
				t.Fatal(err)
			}
			if err := lock.Retain(ctx, []string{key}, until.Add(-time.Second)); err != nil {
				t.Fatalf("retaining again, shorter, must leave the date as it is: %v", err)
			}
			err := lock.Retained(ctx, []string{key, "backups/ns/none"}, time.Now())
			if got, ok := storage.RetainedUntil(err); !ok || !got.Equal(until) || !strings.Contains(err.Error(), "GCS object retention, "+map[storage.LockMode]string{storage.LockGovernance: "Unlocked", storage.LockCompliance: "Locked"}[mode]) {
				t.Fatalf("Retained = %v, want until %s", err, until)
			}
			if mode == storage.LockCompliance {
				// Someone with the bucket's credentials cannot shorten a Locked retention.
				_, err := raw.Bucket("locked").Object(key).OverrideUnlockedRetention(true).Update(ctx,
					gcs.ObjectAttrsToUpdate{Retention: &gcs.ObjectRetention{Mode: "Locked", RetainUntil: time.Now()}})
				if err == nil {
					t.Fatal("a Locked retention was shortened")
				}
			}
			time.Sleep(time.Until(until.Add(100 * time.Millisecond)))
			if err := lock.Retained(ctx, []string{key}, time.Now()); err != nil {
				t.Fatalf("after its date: %v", err)
			}
			if err := store.Delete(ctx, key); err != nil {
				t.Fatalf("deleting after its date: %v", err)
			}
		})
	}
}

// retentionEnabled adds objectRetention {mode: Enabled} to the attributes of bucket that
// fake-gcs-server answers, as GCS does for a bucket with object retention enabled.
func retentionEnabled(bucket string) func(*http.Response) error {
	return func(resp *http.Response) error {
		if resp.Request.Method != http.MethodGet || strings.TrimSuffix(resp.Request.URL.Path, "/") != "/storage/v1/b/"+bucket || resp.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		var attrs map[string]any
		if err := json.Unmarshal(body, &attrs); err != nil {
			return err
		}
		attrs["objectRetention"] = map[string]string{"mode": "Enabled"}
		body, _ = json.Marshal(attrs)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
}

// gcsRawOptions are a plain SDK client's options for fake-gcs-server at endpoint: someone
// holding the bucket's credentials, going around Cairn.
func gcsRawOptions(endpoint string) []option.ClientOption {
	return []option.ClientOption{option.WithoutAuthentication(), option.WithEndpoint(endpoint + "/storage/v1/")}
}
