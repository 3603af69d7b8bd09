package v1alpha1

// Who created a Backup, Restore, Schedule or DownloadRequest (DESIGN.md section 15). The API
// server writes these annotations at admission from request.userInfo (the MutatingAdmissionPolicy
// in config/admission), and a ValidatingAdmissionPolicy refuses any update that adds, changes or
// removes them; no client can set them, save the operator's own identity, which copies a
// Schedule's requester onto the backups it creates. internal/requester reads them.
const (
	// RequesterAnnotation is the requester's username.
	RequesterAnnotation = "cairn.dev/requester"
	// RequesterUIDAnnotation is the requester's UID, empty when the authenticator gives none.
	RequesterUIDAnnotation = "cairn.dev/requester-uid"
	// RequesterGroupsAnnotation is the requester's groups, a JSON array of strings.
	RequesterGroupsAnnotation = "cairn.dev/requester-groups"
	// RequesterExtraAnnotation is the requester's extra attributes, a JSON object of string
	// arrays (authentication.k8s.io UserInfo.extra).
	RequesterExtraAnnotation = "cairn.dev/requester-extra"
)

// RequesterAnnotations are every annotation that records the requester, in the order above.
var RequesterAnnotations = []string{
	RequesterAnnotation, RequesterUIDAnnotation, RequesterGroupsAnnotation, RequesterExtraAnnotation,
}

// The admission policies that record the requester (config/admission, installed by the chart and
// hack/local-up.sh), and their bindings, which have the same names.
const (
	// RequesterPolicyName is the MutatingAdmissionPolicy that writes the requester annotations on
	// create, and its binding.
	RequesterPolicyName = "cairn-requester"
	// RequesterImmutablePolicyName is the ValidatingAdmissionPolicy that refuses updates changing
	// them, and its binding.
	RequesterImmutablePolicyName = "cairn-requester-immutable"
)
