// Package requester reads who created a Backup, Restore, Schedule or DownloadRequest: the
// identity the API server recorded at admission in the cairn.dev/requester* annotations
// (DESIGN.md section 15, config/admission). The operator acts for that identity in team
// namespaces, so it trusts the annotations only when PoliciesInstalled says the API server
// writes them and keeps them from changing.
package requester

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// ErrNoRequester is returned by From for an object with no cairn.dev/requester annotation: it was
// created while the admission policies were not installed (or before an upgrade that brought
// them), and nobody can add one later.
var ErrNoRequester = errors.New("no requester recorded")

// From returns the requester recorded on obj. Every annotation of
// cairn.v1alpha1.RequesterAnnotations must be there, as the admission policy writes them all: a
// missing one, an empty username, or groups or extra that are not the JSON they should be are
// errors that name the annotation. An object without any is ErrNoRequester.
func From(obj metav1.Object) (authenticationv1.UserInfo, error) {
	annotations := obj.GetAnnotations()
	username, ok := annotations[cairnv1.RequesterAnnotation]
	if !ok {
		return authenticationv1.UserInfo{}, fmt.Errorf("%w: the object has no %s annotation", ErrNoRequester, cairnv1.RequesterAnnotation)
	}
	if username == "" {
		return authenticationv1.UserInfo{}, fmt.Errorf("annotation %s is empty", cairnv1.RequesterAnnotation)
	}
	for _, key := range cairnv1.RequesterAnnotations {
		if _, ok := annotations[key]; !ok {
			return authenticationv1.UserInfo{}, fmt.Errorf("annotation %s is missing beside %s", key, cairnv1.RequesterAnnotation)
		}
	}
	user := authenticationv1.UserInfo{Username: username, UID: annotations[cairnv1.RequesterUIDAnnotation]}
	if err := decodeJSON(annotations, cairnv1.RequesterGroupsAnnotation, '[', &user.Groups); err != nil {
		return authenticationv1.UserInfo{}, err
	}
	if err := decodeJSON(annotations, cairnv1.RequesterExtraAnnotation, '{', &user.Extra); err != nil {
		return authenticationv1.UserInfo{}, err
	}
	if len(user.Groups) == 0 {
		user.Groups = nil
	}
	if len(user.Extra) == 0 {
		user.Extra = nil
	}
	return user, nil
}

// decodeJSON decodes the annotation key into v, which must be a JSON value starting with
// opening ('[' for an array, '{' for an object): null, a string or a number is refused too.
func decodeJSON(annotations map[string]string, key string, opening byte, v any) error {
	data := bytes.TrimSpace([]byte(annotations[key]))
	if len(data) == 0 || data[0] != opening {
		return fmt.Errorf("annotation %s is %q, not a JSON %s", key, annotations[key], jsonKind(opening))
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("annotation %s is not a JSON %s: %w", key, jsonKind(opening), err)
	}
	return nil
}

func jsonKind(opening byte) string {
	if opening == '[' {
		return "array of strings"
	}
	return "object of string arrays"
}

// Annotations returns the annotations that record user, as the admission policy writes them:
// the operator sets them on the backups a Schedule creates, to the Schedule's requester, which
// the policy lets only the operator's own identity do.
func Annotations(user authenticationv1.UserInfo) map[string]string {
	groups := user.Groups
	if groups == nil {
		groups = []string{}
	}
	extra := user.Extra
	if extra == nil {
		extra = map[string]authenticationv1.ExtraValue{}
	}
	return map[string]string{
		cairnv1.RequesterAnnotation:       user.Username,
		cairnv1.RequesterUIDAnnotation:    user.UID,
		cairnv1.RequesterGroupsAnnotation: mustJSON(groups),
		cairnv1.RequesterExtraAnnotation:  mustJSON(extra),
	}
}

// mustJSON marshals v, a []string or a map of them, which cannot fail.
func mustJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshaling %T: %v", v, err))
	}
	return string(data)
}
