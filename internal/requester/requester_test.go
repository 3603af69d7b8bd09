package requester

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// recorded is what the admission policy writes for a ServiceAccount's bound token.
func recorded() map[string]string {
	return map[string]string{
		cairnv1.RequesterAnnotation:       "system:serviceaccount:team-a:dev",
		cairnv1.RequesterUIDAnnotation:    "8c3e1e8a-7a4f-4a0e-9d6b-0c2b9f1f5e11",
		cairnv1.RequesterGroupsAnnotation: `["system:serviceaccounts","system:serviceaccounts:team-a","system:authenticated"]`,
		cairnv1.RequesterExtraAnnotation:  `{"authentication.kubernetes.io/credential-id":["JTI=0f6c"]}`,
	}
}

func with(key, value string) map[string]string {
	a := recorded()
	a[key] = value
	return a
}

func without(key string) map[string]string {
	a := recorded()
	delete(a, key)
	return a
}

func TestFrom(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        authenticationv1.UserInfo
		wantErr     string // a substring of the error; "" for none
		noRequester bool   // the error is ErrNoRequester
	}{
		{
			name:        "as the policy records a ServiceAccount",
			annotations: recorded(),
			want: authenticationv1.UserInfo{
				Username: "system:serviceaccount:team-a:dev",
				UID:      "8c3e1e8a-7a4f-4a0e-9d6b-0c2b9f1f5e11",
				Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"},
				Extra:    map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=0f6c"}},
			},
		},
		{
			name: "a user with no UID, groups or extra",
			annotations: map[string]string{
				cairnv1.RequesterAnnotation: "alice", cairnv1.RequesterUIDAnnotation: "",
				cairnv1.RequesterGroupsAnnotation: "[]", cairnv1.RequesterExtraAnnotation: "{}",
			},
			want: authenticationv1.UserInfo{Username: "alice"},
		},
		{
			name:        "escapes as strings.quote writes them",
			annotations: with(cairnv1.RequesterGroupsAnnotation, `["a \"quoted\" group","back\\slash","tab\there","é"]`),
			want: authenticationv1.UserInfo{
				Username: "system:serviceaccount:team-a:dev",
				UID:      "8c3e1e8a-7a4f-4a0e-9d6b-0c2b9f1f5e11",
				Groups:   []string{`a "quoted" group`, `back\slash`, "tab\there", "é"},
				Extra:    map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=0f6c"}},
			},
		},
		{name: "no annotations", annotations: nil, wantErr: "has no cairn.dev/requester annotation", noRequester: true},
		{name: "other annotations only", annotations: map[string]string{"a": "b"}, wantErr: "has no cairn.dev/requester annotation", noRequester: true},
		{name: "empty username", annotations: with(cairnv1.RequesterAnnotation, ""), wantErr: "annotation cairn.dev/requester is empty"},
		{name: "uid missing", annotations: without(cairnv1.RequesterUIDAnnotation), wantErr: "annotation cairn.dev/requester-uid is missing"},
		{name: "groups missing", annotations: without(cairnv1.RequesterGroupsAnnotation), wantErr: "annotation cairn.dev/requester-groups is missing"},
		{name: "extra missing", annotations: without(cairnv1.RequesterExtraAnnotation), wantErr: "annotation cairn.dev/requester-extra is missing"},
		{name: "groups not JSON", annotations: with(cairnv1.RequesterGroupsAnnotation, "system:masters"), wantErr: `annotation cairn.dev/requester-groups is "system:masters", not a JSON array of strings`},
		{name: "groups null", annotations: with(cairnv1.RequesterGroupsAnnotation, "null"), wantErr: "not a JSON array of strings"},
		{name: "groups of numbers", annotations: with(cairnv1.RequesterGroupsAnnotation, "[1]"), wantErr: "annotation cairn.dev/requester-groups is not a JSON array of strings"},
		{name: "groups with trailing data", annotations: with(cairnv1.RequesterGroupsAnnotation, `["a"]]`), wantErr: "annotation cairn.dev/requester-groups is not a JSON array of strings"},
		{name: "groups with a CEL-only escape", annotations: with(cairnv1.RequesterGroupsAnnotation, `["bell\a"]`), wantErr: "annotation cairn.dev/requester-groups is not a JSON array of strings"},
		{name: "extra an array", annotations: with(cairnv1.RequesterExtraAnnotation, `[]`), wantErr: "annotation cairn.dev/requester-extra is \"[]\", not a JSON object of string arrays"},
		{name: "extra values not arrays", annotations: with(cairnv1.RequesterExtraAnnotation, `{"k":"v"}`), wantErr: "annotation cairn.dev/requester-extra is not a JSON object of string arrays"},
		{name: "extra empty", annotations: with(cairnv1.RequesterExtraAnnotation, ""), wantErr: "not a JSON object of string arrays"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := From(&metav1.ObjectMeta{Annotations: tt.annotations})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("From: %v", err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("From = %#v, want %#v", got, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("From error = %v, want one containing %q", err, tt.wantErr)
			}
			if errors.Is(err, ErrNoRequester) != tt.noRequester {
				t.Errorf("errors.Is(%v, ErrNoRequester) = %v, want %v", err, !tt.noRequester, tt.noRequester)
			}
			if !reflect.DeepEqual(got, authenticationv1.UserInfo{}) {
				t.Errorf("From returned %#v with its error, want the zero UserInfo", got)
			}
		})
	}
}

// TestAnnotationsRoundTrip: From reads back what Annotations writes, and Annotations writes
// every annotation of cairnv1.RequesterAnnotations (the schedule controller copies them all).
func TestAnnotationsRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		user authenticationv1.UserInfo
	}{
		{"username only", authenticationv1.UserInfo{Username: "alice"}},
		{"everything", authenticationv1.UserInfo{
			Username: "system:serviceaccount:team-a:dev", UID: "u-1",
			Groups: []string{"system:authenticated", `with "quotes" <and> & \`},
			Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/credential-id": {"JTI=1"},
				"scopes.example.com":                         {"a", "b"},
			},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			annotations := Annotations(tt.user)
			if len(annotations) != len(cairnv1.RequesterAnnotations) {
				t.Errorf("Annotations wrote %d annotations, want %d: %v", len(annotations), len(cairnv1.RequesterAnnotations), annotations)
			}
			for _, key := range cairnv1.RequesterAnnotations {
				if _, ok := annotations[key]; !ok {
					t.Errorf("Annotations wrote no %s", key)
				}
			}
			got, err := From(&metav1.ObjectMeta{Annotations: annotations})
			if err != nil {
				t.Fatalf("From(Annotations(%#v)): %v", tt.user, err)
			}
			if !reflect.DeepEqual(got, tt.user) {
				t.Errorf("From(Annotations(u)) = %#v, want %#v", got, tt.user)
			}
		})
	}
}

func TestAnnotationsEmptyAsThePolicyWritesThem(t *testing.T) {
	got := Annotations(authenticationv1.UserInfo{Username: "alice"})
	want := map[string]string{
		cairnv1.RequesterAnnotation: "alice", cairnv1.RequesterUIDAnnotation: "",
		cairnv1.RequesterGroupsAnnotation: "[]", cairnv1.RequesterExtraAnnotation: "{}",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Annotations = %v, want %v", got, want)
	}
}
