package storage_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-backup/cairn/internal/storage"
)

func TestParseSharedCredentials(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	tests := []struct {
		name    string
		file    string
		profile string
		want    storage.S3Credentials
		wantErr string
	}{
		{name: "velero's format", file: "[default]\naws_access_key_id = AKID\naws_secret_access_key = " + secret + "\n",
			want: storage.S3Credentials{AccessKeyID: "AKID", SecretAccessKey: secret}},
		{name: "session token, comments, other profiles", file: "# c\n[other]\naws_access_key_id=X\n\n[default]\n; c\naws_access_key_id=AKID\naws_secret_access_key=" + secret + "\naws_session_token=TOK\n",
			want: storage.S3Credentials{AccessKeyID: "AKID", SecretAccessKey: secret, SessionToken: "TOK"}},
		{name: "named profile", file: "[profile backup]\naws_access_key_id=B\naws_secret_access_key=" + secret + "\n", profile: "backup",
			want: storage.S3Credentials{AccessKeyID: "B", SecretAccessKey: secret}},
		{name: "no default profile", file: "[other]\naws_access_key_id=X\naws_secret_access_key=" + secret + "\n", wantErr: "has no [default] profile"},
		{name: "no secret key", file: "[default]\naws_access_key_id=X\n", wantErr: "has no aws_secret_access_key"},
		{name: "no key id", file: "[default]\naws_secret_access_key=" + secret + "\n", wantErr: "has no aws_access_key_id"},
		{name: "garbage line", file: "[default]\n" + secret + "\n", wantErr: "line 2: expected key = value"},
		{name: "broken header", file: "[default\n", wantErr: "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := storage.ParseSharedCredentials([]byte(tt.file), tt.profile)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error quotes the secret: %v", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestS3CredentialsNeverPrintTheirSecrets(t *testing.T) {
	c := storage.S3Credentials{AccessKeyID: "AKID", SecretAccessKey: "SECRET", SessionToken: "TOKEN"}
	cfg := storage.S3Config{Bucket: "b", Credentials: c}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v", c, cfg, cfg)} {
		if strings.Contains(s, "SECRET") || strings.Contains(s, "TOKEN") {
			t.Errorf("printed the secrets: %s", s)
		}
	}
}
