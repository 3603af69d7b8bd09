package storage_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

func newAzure(t *testing.T, a *emulator.Azurite, container string, creds storage.AzureCredentials) *storage.Azure {
	t.Helper()
	s, err := storage.NewAzure(storage.AzureConfig{
		Account: a.Account, Container: container, Endpoint: a.Endpoint(), Credentials: creds, PartSize: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// azureStores is a new container of a for each call: the stores the shared suites run on.
func azureStores(a *emulator.Azurite, name string) func(t *testing.T) storage.ObjectStore {
	n := 0
	return func(t *testing.T) storage.ObjectStore {
		n++
		container := fmt.Sprintf("%s-%d", name, n)
		a.CreateContainer(container)
		return newAzure(t, a, container, storage.AzureCredentials{SharedKey: a.Key})
	}
}

func TestAzureConformance(t *testing.T) {
	runConformance(t, azureStores(emulator.StartAzurite(t), "conformance"))
}

func TestAzureValidate(t *testing.T) {
	a := emulator.StartAzurite(t)
	a.CreateContainer("backups")
	wrongKey := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("wrong-key-value!", 4)))
	tests := []struct {
		name    string
		store   func() *storage.Azure
		wantErr string
	}{
		{name: "good", store: func() *storage.Azure { return newAzure(t, a, "backups", storage.AzureCredentials{SharedKey: a.Key}) }},
		{name: "missing container", store: func() *storage.Azure { return newAzure(t, a, "nope", storage.AzureCredentials{SharedKey: a.Key}) },
			wantErr: `container "nope" does not exist at ` + a.Endpoint()},
		{name: "wrong key", store: func() *storage.Azure { return newAzure(t, a, "backups", storage.AzureCredentials{SharedKey: wrongKey}) },
			wantErr: `access denied to container "backups" at ` + a.Endpoint() + " (AuthorizationFailure)"},
		{name: "forged SAS token", store: func() *storage.Azure {
			return newAzure(t, a, "backups", storage.AzureCredentials{SASToken: "sv=2021-08-06&sr=c&sp=rl&se=2099-01-01T00%3A00%3A00Z&sig=d3JvbmctdG9rZW4tdmFsdWU%3D"})
		}, wantErr: `access denied to container "backups"`},
		{name: "unreachable endpoint", store: func() *storage.Azure {
			s, err := storage.NewAzure(storage.AzureConfig{Account: a.Account, Container: "backups", Endpoint: "http://127.0.0.1:1/" + a.Account,
				Credentials: storage.AzureCredentials{SharedKey: a.Key}})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, wantErr: "cannot reach the azure endpoint http://127.0.0.1:1/" + a.Account + ": connect: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.store().Validate(context.Background(), "prefix/")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
			for _, secret := range []string{a.Key, wrongKey, "d3JvbmctdG9rZW4tdmFsdWU"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the message quotes a secret: %v", err)
				}
			}
		})
	}
}

func TestAzureCredentialsNeverPrintTheirSecrets(t *testing.T) {
	c := storage.AzureCredentials{SharedKey: "the-shared-key", SASToken: "the-sas-token"}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c)} {
		if strings.Contains(s, "the-shared-key") || strings.Contains(s, "the-sas-token") {
			t.Errorf("printed %q", s)
		}
	}
}

func TestParseAzureCredentials(t *testing.T) {
	for _, tt := range []struct {
		name, data string
		want       storage.AzureCredentials
		wantErr    string
	}{
		{name: "shared key", data: "AZURE_STORAGE_ACCOUNT_ACCESS_KEY=a2V5\nAZURE_CLOUD_NAME=AzurePublicCloud\n", want: storage.AzureCredentials{SharedKey: "a2V5"}},
		{name: "SAS token, quoted, with comments", data: "# the team's token\nAZURE_STORAGE_SAS_TOKEN=\"sv=1&sig=x\"\n", want: storage.AzureCredentials{SASToken: "sv=1&sig=x"}},
		{name: "both", data: "AZURE_STORAGE_ACCOUNT_ACCESS_KEY=a2V5\nAZURE_STORAGE_SAS_TOKEN=sv=1\n", wantErr: "keep one"},
		{name: "not NAME=value", data: "a2V5-the-secret\n", wantErr: "line 1: expected NAME=value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := storage.ParseAzureCredentials([]byte(tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "a2V5") {
					t.Fatalf("err = %v, want %q quoting no secret", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("= %v (the fields differ: %v), %v", got, got != tt.want, err)
			}
		})
	}
}
