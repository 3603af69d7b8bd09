package location

import (
	"errors"
	"strings"
	"testing"

	"github.com/kopia/kopia/repo/blob/azure"

	"github.com/cairn-backup/cairn/internal/storage"
)

func TestKopiaAzureOptions(t *testing.T) {
	key := storage.AzureCredentials{SharedKey: "a2V5"}
	for _, tt := range []struct {
		name       string
		cfg        storage.AzureConfig
		credential bool
		env        map[string]string
		want       azure.Options
		wantErr    string
	}{
		{name: "Azure's public cloud", cfg: storage.AzureConfig{Account: "acct", Container: "c", Credentials: key}, credential: true,
			want: azure.Options{Container: "c", StorageAccount: "acct", Prefix: "p/kopia/ns/", StorageKey: "a2V5"}},
		{name: "a sovereign cloud's endpoint", cfg: storage.AzureConfig{Account: "acct", Container: "c", Endpoint: "https://acct.blob.core.chinacloudapi.cn/", Credentials: key}, credential: true,
			want: azure.Options{Container: "c", StorageAccount: "acct", Prefix: "p/kopia/ns/", StorageKey: "a2V5", StorageDomain: "blob.core.chinacloudapi.cn"}},
		{name: "plain http", cfg: storage.AzureConfig{Account: "acct", Container: "c", Endpoint: "http://acct.blob.example:8080", Credentials: key}, credential: true,
			want: azure.Options{Container: "c", StorageAccount: "acct", Prefix: "p/kopia/ns/", StorageKey: "a2V5", StorageDomain: "blob.example:8080", DoNotUseTLS: true}},
		{name: "a SAS token", cfg: storage.AzureConfig{Account: "acct", Container: "c", Credentials: storage.AzureCredentials{SASToken: "?sv=1&sig=x"}}, credential: true,
			want: azure.Options{Container: "c", StorageAccount: "acct", Prefix: "p/kopia/ns/", SASToken: "sv=1&sig=x"}},
		{name: "workload identity", cfg: storage.AzureConfig{Account: "acct", Container: "c"},
			env:  map[string]string{"AZURE_TENANT_ID": "t", "AZURE_CLIENT_ID": "c", "AZURE_FEDERATED_TOKEN_FILE": "/var/run/token"},
			want: azure.Options{Container: "c", StorageAccount: "acct", Prefix: "p/kopia/ns/", TenantID: "t", ClientID: "c", AzureFederatedTokenFile: "/var/run/token"}},
		{name: "no Secret and no workload identity", cfg: storage.AzureConfig{Account: "acct", Container: "c"},
			env: map[string]string{"AZURE_TENANT_ID": "", "AZURE_CLIENT_ID": "", "AZURE_FEDERATED_TOKEN_FILE": ""}, wantErr: "needs workload identity"},
		{name: "an emulator's path-style endpoint", cfg: storage.AzureConfig{Account: "acct", Container: "c", Endpoint: "http://127.0.0.1:10000/acct", Credentials: key}, credential: true,
			wantErr: "needs config.endpoint of the form https://acct.<storage domain>"},
		{name: "another account's host", cfg: storage.AzureConfig{Account: "acct", Container: "c", Endpoint: "https://other.blob.core.windows.net", Credentials: key}, credential: true,
			wantErr: "needs config.endpoint of the form"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := kopiaAzureOptions(tt.cfg, tt.credential, "p/kopia/ns")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v, want an ErrConfig saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || *got != tt.want {
				t.Fatalf("= %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
