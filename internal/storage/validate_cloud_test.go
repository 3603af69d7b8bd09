package storage_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// shiftDate moves the Date header of every answer by shift: a server whose clock is off.
func shiftDate(shift time.Duration) func(*http.Response) error {
	return func(resp *http.Response) error {
		resp.Header.Set("Date", time.Now().Add(shift).UTC().Format(http.TimeFormat))
		return nil
	}
}

// Validation names a server clock minutes away from this one's, through a proxy in front of
// each emulator that moves its Date header; a few seconds away is no problem.
func TestValidateNamesClockSkew(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("backups")
	gcsServer := startGCS(t)
	gcsServer.CreateBucket("backups")
	for _, tt := range []struct {
		name  string
		shift time.Duration
		want  string
	}{
		{name: "seconds apart", shift: 20 * time.Second},
		{name: "server behind", shift: -10 * time.Minute, want: "ahead of the"},
		{name: "server ahead", shift: 8 * time.Minute, want: "behind the"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			azureProxy := startRecordingProxy(t, a.Endpoint(), nil, shiftDate(tt.shift)) //nolint:bodyclose // a ModifyResponse hook: the proxy closes the body
			azure, err := storage.NewAzure(storage.AzureConfig{Account: a.Account, Container: "backups", Endpoint: azureProxy.URL + "/" + a.Account,
				Credentials: storage.AzureCredentials{SharedKey: a.Key}})
			if err != nil {
				t.Fatal(err)
			}
			gcsProxy := startRecordingProxy(t, gcsServer.Endpoint(), nil, shiftDate(tt.shift)) //nolint:bodyclose // a ModifyResponse hook: the proxy closes the body
			gcsStore, err := storage.NewGCS(storage.GCSConfig{Bucket: "backups", Endpoint: gcsProxy.URL, Credentials: storage.GCSCredentials{JSON: gcsServer.key}})
			if err != nil {
				t.Fatal(err)
			}
			for provider, validate := range map[string]func(context.Context, string) error{"azure": azure.Validate, "gcs": gcsStore.Validate} {
				err := validate(context.Background(), "prefix/")
				if tt.want == "" {
					if err != nil {
						t.Errorf("%s: Validate = %v", provider, err)
					}
					continue
				}
				if err == nil || !strings.Contains(err.Error(), "the clock here is") || !strings.Contains(err.Error(), tt.want+" "+provider+" endpoint") {
					t.Errorf("%s: Validate = %v, want the clock skew named", provider, err)
				}
			}
		})
	}
}

// A SAS token that Azurite accepts but that may not list the container is named as such, not
// as refused credentials.
func TestAzureValidateNamesMissingListPermission(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("backups")
	cred, err := blob.NewSharedKeyCredential(a.Account, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	q, err := sas.BlobSignatureValues{
		Protocol: sas.ProtocolHTTPSandHTTP, StartTime: time.Now().Add(-time.Hour).UTC(), ExpiryTime: time.Now().Add(time.Hour).UTC(),
		Permissions: (&sas.ContainerPermissions{Read: true, Write: true}).String(), ContainerName: "backups",
	}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	s := newAzure(t, a, "backups", storage.AzureCredentials{SASToken: q.Encode()})
	err = s.Validate(context.Background(), "prefix/")
	if err == nil || !strings.Contains(err.Error(), "the credentials are accepted but may not list the container") || strings.Contains(err.Error(), q.Signature()) {
		t.Fatalf("Validate = %v, want the list permission named, quoting no signature", err)
	}
}
