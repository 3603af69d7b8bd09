package location

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kopia/kopia/repo/blob/s3"

	"github.com/cairn-backup/cairn/internal/storage"
)

func TestKopiaDir(t *testing.T) {
	tests := []struct {
		prefix, namespace string
		want              string
		wantErr           string
	}{
		{prefix: "", namespace: "shop", want: "kopia/shop"},
		{prefix: "cluster-a", namespace: "shop", want: "cluster-a/kopia/shop"},
		{prefix: "/a/b/", namespace: "shop", want: "a/b/kopia/shop"},
		{prefix: "a/../b", namespace: "shop", wantErr: "'..' segment"},
		{prefix: "a//b", namespace: "shop", wantErr: "empty"},
		{prefix: "a", namespace: "..", wantErr: `namespace ".."`},
		{prefix: "a", namespace: "shop/x", wantErr: `namespace "shop/x"`},
		{prefix: "a", namespace: "", wantErr: `namespace ""`},
		{prefix: "a", namespace: "Shop", wantErr: `namespace "Shop"`},
	}
	for _, tt := range tests {
		got, err := kopiaDir(tt.prefix, tt.namespace)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("kopiaDir(%q, %q) = %q, %v; want an error with %q", tt.prefix, tt.namespace, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("kopiaDir(%q, %q) = %q, %v; want %q", tt.prefix, tt.namespace, got, err, tt.want)
		}
	}
}

func TestKopiaS3Options(t *testing.T) {
	creds := storage.S3Credentials{AccessKeyID: "AK", SecretAccessKey: "SK", SessionToken: "ST"}
	tests := []struct {
		name          string
		cfg           storage.S3Config
		hasCredential bool
		want          s3.Options
		wantErr       string
	}{
		{name: "http endpoint", cfg: storage.S3Config{Bucket: "b", Endpoint: "http://10.0.0.1:9000", Region: "eu-1", Credentials: creds},
			hasCredential: true,
			want: s3.Options{BucketName: "b", Prefix: "p/kopia/ns/", Endpoint: "10.0.0.1:9000", DoNotUseTLS: true, Region: "eu-1",
				AccessKeyID: "AK", SecretAccessKey: "SK", SessionToken: "ST"}},
		{name: "https endpoint, trailing slash, skip verify", cfg: storage.S3Config{Bucket: "b", Endpoint: "https://s3.example.com/", InsecureSkipTLSVerify: true, Credentials: creds},
			hasCredential: true,
			want: s3.Options{BucketName: "b", Prefix: "p/kopia/ns/", Endpoint: "s3.example.com", DoNotVerifyTLS: true,
				AccessKeyID: "AK", SecretAccessKey: "SK", SessionToken: "ST"}},
		{name: "no endpoint is AWS", cfg: storage.S3Config{Bucket: "b", Region: "us-west-2", Credentials: creds}, hasCredential: true,
			want: s3.Options{BucketName: "b", Prefix: "p/kopia/ns/", Endpoint: "s3.amazonaws.com", Region: "us-west-2",
				AccessKeyID: "AK", SecretAccessKey: "SK", SessionToken: "ST"}},
		{name: "no credential on purpose: the keys stay empty", cfg: storage.S3Config{Bucket: "b", Endpoint: "http://h:1"},
			want: s3.Options{BucketName: "b", Prefix: "p/kopia/ns/", Endpoint: "h:1", DoNotUseTLS: true}},
		{name: "a credential with an empty secret is refused", cfg: storage.S3Config{Bucket: "b", Credentials: storage.S3Credentials{AccessKeyID: "AK"}},
			hasCredential: true, wantErr: "empty access key or secret key"},
		{name: "a credential with no keys is refused", cfg: storage.S3Config{Bucket: "b"}, hasCredential: true,
			wantErr: "empty access key or secret key"},
		{name: "endpoint without scheme", cfg: storage.S3Config{Bucket: "b", Endpoint: "minio:9000"}, wantErr: "must be an http:// or https:// URL"},
		{name: "endpoint with another scheme", cfg: storage.S3Config{Bucket: "b", Endpoint: "ftp://minio"}, wantErr: "must be an http:// or https:// URL"},
		{name: "endpoint with a path", cfg: storage.S3Config{Bucket: "b", Endpoint: "https://gw.example.com/s3"}, wantErr: "has a path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kopiaS3Options(tt.cfg, tt.hasCredential, "p/kopia/ns")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v, want an ErrConfig with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("options = %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}
