package storage

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gcs "cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"google.golang.org/api/googleapi"
)

// azureResponseError is the error the Azure SDK returns for an answer of status with code.
func azureResponseError(status int, code string) error {
	resp := &http.Response{StatusCode: status, Status: http.StatusText(status), Header: http.Header{},
		Request: httptest.NewRequest(http.MethodPut, "http://127.0.0.1/acct/c/k?comp=immutabilityPolicies&sig=secret", nil)}
	if code != "" {
		resp.Header.Set("x-ms-error-code", code)
	}
	return &azcore.ResponseError{ErrorCode: code, StatusCode: status, RawResponse: resp}
}

func TestAzureLockSupport(t *testing.T) {
	yes, no := true, false
	for _, tt := range []struct {
		name string
		vlw  *bool
		want string
	}{
		{name: "version-level immutability support", vlw: &yes},
		{name: "none", vlw: &no, want: `container "c" at http://e does not have version-level immutability support`},
		{name: "the service says nothing (Azurite)", vlw: nil, want: "enable it on the container"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := azureLockSupport(tt.vlw, "c", "http://e")
			if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("azureLockSupport = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestAzureModes(t *testing.T) {
	if got := azurePolicyMode(LockGovernance); got != blob.ImmutabilityPolicySettingUnlocked {
		t.Errorf("Governance = %s, want Unlocked", got)
	}
	if got := azurePolicyMode(LockCompliance); got != blob.ImmutabilityPolicySettingLocked {
		t.Errorf("Compliance = %s, want Locked", got)
	}
	for mode, want := range map[blob.ImmutabilityPolicyMode]LockMode{
		blob.ImmutabilityPolicyModeLocked: LockCompliance, blob.ImmutabilityPolicyModeUnlocked: LockGovernance, blob.ImmutabilityPolicyModeMutable: LockGovernance,
	} {
		if got := azureLockMode(&mode); got != want {
			t.Errorf("%s = %s, want %s", mode, got, want)
		}
	}
}

func TestAzureRetention(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	locked, unlocked := blob.ImmutabilityPolicyModeLocked, blob.ImmutabilityPolicyModeUnlocked
	for _, tt := range []struct {
		name       string
		props      *container.BlobProperties
		wantUntil  time.Time
		wantPolicy string
	}{
		{name: "no properties"},
		{name: "no policy", props: &container.BlobProperties{}},
		{name: "a policy that has ended", props: &container.BlobProperties{ImmutabilityPolicyExpiresOn: &now, ImmutabilityPolicyMode: &locked}},
		{name: "a locked policy", props: &container.BlobProperties{ImmutabilityPolicyExpiresOn: &later, ImmutabilityPolicyMode: &locked},
			wantUntil: later, wantPolicy: "Azure immutability policy, Locked"},
		{name: "an unlocked policy", props: &container.BlobProperties{ImmutabilityPolicyExpiresOn: &later, ImmutabilityPolicyMode: &unlocked},
			wantUntil: later, wantPolicy: "Azure immutability policy, Unlocked"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := azureRetention("k", tt.props, now)
			if tt.wantUntil.IsZero() {
				if r != nil {
					t.Fatalf("azureRetention = %v, want none", r)
				}
				return
			}
			if r == nil || !r.Until.Equal(tt.wantUntil) || r.Policy != tt.wantPolicy || !strings.Contains(r.Error(), tt.wantPolicy) {
				t.Fatalf("azureRetention = %v, want until %s by %q", r, tt.wantUntil, tt.wantPolicy)
			}
		})
	}
}

func TestAzureLockAndDeleteFailures(t *testing.T) {
	for _, tt := range []struct {
		name string
		got  string
		want string
	}{
		{name: "Azurite: not implemented", got: azureLockFailure(azureResponseError(http.StatusNotImplemented, "APINotImplemented")),
			want: "the service does not implement immutability policies (APINotImplemented"},
		{name: "a conflict", got: azureLockFailure(azureResponseError(http.StatusConflict, "OperationNotAllowedInCurrentState")),
			want: "OperationNotAllowedInCurrentState: does the container have version-level immutability support?"},
		{name: "another failure", got: azureLockFailure(azureResponseError(http.StatusForbidden, "AuthorizationPermissionMismatch")),
			want: "AuthorizationPermissionMismatch"},
		{name: "deleting a locked version", got: azureDeleteFailure(azureResponseError(http.StatusConflict, "BlobImmutableDueToPolicy")),
			want: "BlobImmutableDueToPolicy: it is still locked by its immutability policy"},
		{name: "deleting, another failure", got: azureDeleteFailure(azureResponseError(http.StatusInternalServerError, "")),
			want: "HTTP 500 Internal Server Error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(tt.got, tt.want) || strings.Contains(tt.got, "sig=secret") {
				t.Fatalf("= %q, want %q and no request URL", tt.got, tt.want)
			}
		})
	}
}

func TestAzureProblem(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{name: "container missing", err: azureResponseError(http.StatusNotFound, "ContainerNotFound"), want: `container "c" does not exist at http://e`},
		{name: "key refused", err: azureResponseError(http.StatusForbidden, "AuthenticationFailed"),
			want: `access denied to container "c" at http://e (AuthenticationFailed): the credentials in the location's credential secret were refused`},
		{name: "no permission to list", err: azureResponseError(http.StatusForbidden, "AuthorizationPermissionMismatch"),
			want: "the credentials are accepted but may not list the container: a SAS token needs the list permission (sp=l)"},
		{name: "another 403", err: azureResponseError(http.StatusForbidden, ""), want: "access denied to container \"c\" at http://e (HTTP 403 Forbidden)"},
		{name: "another error", err: azureResponseError(http.StatusInternalServerError, "InternalError")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := azureProblem(tt.err, "c", "http://e")
			if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("azureProblem = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestGCSLockSupport(t *testing.T) {
	for _, tt := range []struct {
		name  string
		attrs *gcs.BucketAttrs
		want  string
	}{
		{name: "object retention enabled", attrs: &gcs.BucketAttrs{ObjectRetentionMode: "Enabled"}},
		{name: "none", attrs: &gcs.BucketAttrs{}, want: `bucket "b" at http://e does not have object retention enabled, which spec.objectLock needs`},
		{name: "a bucket retention policy only", attrs: &gcs.BucketAttrs{RetentionPolicy: &gcs.RetentionPolicy{RetentionPeriod: 24 * time.Hour}},
			want: "its bucket retention policy keeps every object 24h0m0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := gcsLockSupport(tt.attrs, "b", "http://e")
			if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("gcsLockSupport = %v, want %q", err, tt.want)
			}
		})
	}
	if gcsRetentionMode(LockGovernance) != "Unlocked" || gcsRetentionMode(LockCompliance) != "Locked" {
		t.Error("Governance must be Unlocked, Compliance Locked")
	}
}

func TestGCSRetention(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	hour, day := now.Add(time.Hour), now.Add(24*time.Hour)
	for _, tt := range []struct {
		name       string
		attrs      *gcs.ObjectAttrs
		wantUntil  time.Time
		wantMode   LockMode
		wantPolicy string
	}{
		{name: "none", attrs: &gcs.ObjectAttrs{}},
		{name: "ended", attrs: &gcs.ObjectAttrs{Retention: &gcs.ObjectRetention{Mode: "Locked", RetainUntil: now}, RetentionExpirationTime: now.Add(-time.Hour)}},
		{name: "locked", attrs: &gcs.ObjectAttrs{Retention: &gcs.ObjectRetention{Mode: "Locked", RetainUntil: hour}},
			wantUntil: hour, wantMode: LockCompliance, wantPolicy: "GCS object retention, Locked mode"},
		{name: "unlocked", attrs: &gcs.ObjectAttrs{Retention: &gcs.ObjectRetention{Mode: "Unlocked", RetainUntil: hour}},
			wantUntil: hour, wantMode: LockGovernance, wantPolicy: "GCS object retention, Unlocked mode"},
		{name: "the bucket's policy keeps it longer", attrs: &gcs.ObjectAttrs{Retention: &gcs.ObjectRetention{Mode: "Unlocked", RetainUntil: hour}, RetentionExpirationTime: day},
			wantUntil: day, wantMode: LockCompliance, wantPolicy: "the GCS bucket's retention policy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := gcsRetention("k", tt.attrs, now)
			if tt.wantUntil.IsZero() {
				if r != nil {
					t.Fatalf("gcsRetention = %v, want none", r)
				}
				return
			}
			if r == nil || !r.Until.Equal(tt.wantUntil) || r.Mode != tt.wantMode || r.Policy != tt.wantPolicy {
				t.Fatalf("gcsRetention = %+v, want until %s, %s, %q", r, tt.wantUntil, tt.wantMode, tt.wantPolicy)
			}
		})
	}
}

func TestGCSDeleteRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil"},
		{name: "object retention", want: true, err: fmt.Errorf("wrapped: %w", &googleapi.Error{Code: http.StatusForbidden,
			Message: "Object 'b/k' is subject to object retention and cannot be deleted, overwritten or archived until 2027-01-01T00:00:00Z"})},
		{name: "bucket retention policy", want: true, err: &googleapi.Error{Code: http.StatusForbidden,
			Message: "Object 'b/k' is subject to bucket's retention policy and cannot be deleted, overwritten or archived until 2027-01-01T00:00:00Z"}},
		{name: "a hold", want: true, err: &googleapi.Error{Code: http.StatusForbidden, Message: "Object 'b/k' is under active Temporary hold and cannot be deleted"}},
		{name: "a permission", err: &googleapi.Error{Code: http.StatusForbidden, Message: "cairn@p.iam.gserviceaccount.com does not have storage.objects.delete access"}},
		{name: "missing", err: gcs.ErrObjectNotExist},
		{name: "another error", err: errors.New("retention of the connection failed")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := gcsDeleteRefused(tt.err); got != tt.want {
				t.Fatalf("gcsDeleteRefused = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestClockSkewProblem(t *testing.T) {
	local := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		server time.Time
		want   string
	}{
		{name: "no response yet"},
		{name: "same second", server: local},
		{name: "a Date's second of rounding", server: local.Add(-999 * time.Millisecond)},
		{name: "just within", server: local.Add(-maxClockSkew)},
		{name: "ahead", server: local.Add(-10 * time.Minute), want: "the clock here is 10m0s ahead of the azure endpoint http://e's (its Date header said 2026-12-07T11:50:00Z at 2026-12-07T12:00:00Z here)"},
		{name: "behind", server: local.Add(6*time.Minute + 30*time.Second), want: "the clock here is 6m30s behind the azure endpoint http://e's"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := local
			if tt.server.IsZero() {
				l = time.Time{}
			}
			err := clockSkewProblem("azure", "http://e", tt.server, l)
			if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("clockSkewProblem = %v, want %q", err, tt.want)
			}
		})
	}
}

// The transport keeps the Date of the latest answer, with the local time it came at.
func TestServerClock(t *testing.T) {
	date := time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", date.Format(http.TimeFormat))
	}))
	defer srv.Close()
	c := newServerClock(http.DefaultTransport)
	local := date.Add(time.Hour)
	c.now = func() time.Time { return local }
	if err := c.skewProblem("gcs", srv.URL); err != nil {
		t.Fatalf("before any answer: %v", err)
	}
	resp, err := (&http.Client{Transport: c}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if err := c.skewProblem("gcs", srv.URL); err == nil || !strings.Contains(err.Error(), "1h0m0s ahead of the gcs endpoint") {
		t.Fatalf("skewProblem = %v", err)
	}
}

// RetainedError names the provider's policy, or S3's Object Lock mode.
func TestRetainedErrorPolicy(t *testing.T) {
	until := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	if msg := (&RetainedError{Key: "k", Until: until, Mode: LockGovernance}).Error(); !strings.Contains(msg, "(Object Lock, GOVERNANCE mode) until 2027-01-01T00:00:00Z (k)") {
		t.Errorf("s3: %s", msg)
	}
	if msg := (&RetainedError{Key: "k", Until: until, Mode: LockCompliance, Policy: "GCS object retention, Locked mode"}).Error(); !strings.Contains(msg, "(GCS object retention, Locked mode) until 2027-01-01T00:00:00Z") {
		t.Errorf("gcs: %s", msg)
	}
}
