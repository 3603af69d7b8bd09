package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// AdmissionDir is where the admission policies that record the requester are (DESIGN.md
// section 15); the chart renders the same files.
func AdmissionDir() string {
	return filepath.Join(RepoRoot(), "config", "admission")
}

// ConfigOperatorUsername is the operator's username in config/admission/requester.yaml (the
// ServiceAccount of config/default), which every installer replaces with the user its manager
// runs as: the chart, hack/local-up.sh and AdmissionPolicies.
const ConfigOperatorUsername = "system:serviceaccount:cairn-system:cairn-manager"

// admissionPoliciesTimeout bounds how long InstallAdmissionPolicies waits for the API server to
// enforce the policies it created (it loads them in the background, within a second or two).
const admissionPoliciesTimeout = 30 * time.Second

// AdmissionPolicies returns the objects of config/admission with operator as the operator's
// identity, the user whose creates keep the requester annotations they carry. The file that names
// ConfigOperatorUsername must name it exactly once, so that no replacement is missed.
func AdmissionPolicies(operator string) ([]*unstructured.Unstructured, error) {
	if operator == "" || strings.ContainsAny(operator, `"\`) {
		return nil, fmt.Errorf("operator %q cannot go into the policy's CEL string literal", operator)
	}
	files, err := filepath.Glob(filepath.Join(AdmissionDir(), "*.yaml"))
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	replaced := 0
	for _, file := range files {
		if filepath.Base(file) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if n := bytes.Count(data, []byte(ConfigOperatorUsername)); n > 0 {
			if n != 1 {
				return nil, fmt.Errorf("%s names %s %d times, want once", file, ConfigOperatorUsername, n)
			}
			replaced++
			data = bytes.ReplaceAll(data, []byte(ConfigOperatorUsername), []byte(operator))
		}
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			if len(obj.Object) > 0 {
				objs = append(objs, obj)
			}
		}
	}
	if replaced != 1 {
		return nil, fmt.Errorf("%d files of %s name the operator %s, want 1", replaced, AdmissionDir(), ConfigOperatorUsername)
	}
	return objs, nil
}

// Username is the name the API server authenticates cfg as (a SelfSubjectReview).
func Username(ctx context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the API server who %s is: %w", cfg.Host, err)
	}
	return review.Status.UserInfo.Username, nil
}

// InstallAdmissionPolicies creates the admission policies of config/admission (AdmissionPolicies)
// with admin, a cluster administrator's config; the operator's identity is the user that manager,
// the config the suite's manager runs with, authenticates as. It returns once the API server
// enforces both policies: a create by another user has its forged requester replaced, and an
// update changing it is refused. Every suite calls it right after its environment starts, so
// that every test control plane records requesters as a cluster with the chart does.
func InstallAdmissionPolicies(ctx context.Context, admin, manager *rest.Config) error {
	operator, err := Username(ctx, manager)
	if err != nil {
		return err
	}
	objs, err := AdmissionPolicies(operator)
	if err != nil {
		return err
	}
	c, err := client.New(admin, client.Options{Scheme: Scheme()})
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return waitForAdmissionPolicies(ctx, admin, c)
}

// waitForAdmissionPolicies probes both policies until they act: a server-side dry run of a create
// by a user other than the operator, with a forged requester, and of an update that changes the
// requester of a paused Schedule made for the probe (and deleted after it).
func waitForAdmissionPolicies(ctx context.Context, admin *rest.Config, c client.Client) error {
	const probeUser = "cairn:admission-probe"
	probeCfg := rest.CopyConfig(admin)
	probeCfg.Impersonate = rest.ImpersonationConfig{UserName: probeUser, Groups: []string{"system:masters"}}
	probe, err := client.New(probeCfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return err
	}
	newSchedule := func() *cairnv1.Schedule {
		return &cairnv1.Schedule{
			ObjectMeta: metav1.ObjectMeta{
				Name: "cairn-admission-probe-" + rand.String(5), Namespace: metav1.NamespaceDefault,
				Annotations: map[string]string{cairnv1.RequesterAnnotation: "forged"},
			},
			Spec: cairnv1.ScheduleSpec{Schedule: "@every 24h", Paused: true},
		}
	}
	existing := newSchedule()
	if err := c.Create(ctx, existing); err != nil {
		return fmt.Errorf("creating the Schedule that probes the admission policies: %w", err)
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), existing) }()

	var last string
	ctx, cancel := context.WithTimeout(ctx, admissionPoliciesTimeout)
	defer cancel()
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		created := newSchedule()
		if err := probe.Create(ctx, created, client.DryRunAll); err != nil {
			// Such as a client whose REST mapper has not yet seen the new CRDs: try again.
			last = fmt.Sprintf("probing %s: %v", cairnv1.RequesterPolicyName, err)
			return false, nil
		}
		if got := created.Annotations[cairnv1.RequesterAnnotation]; got != probeUser {
			last = fmt.Sprintf("a create by %s recorded requester %q", probeUser, got)
			return false, nil
		}
		// The manager may have written the probe's status meanwhile: update the latest version.
		if err := c.Get(ctx, client.ObjectKeyFromObject(existing), existing); err != nil {
			last = fmt.Sprintf("reading the probe's Schedule: %v", err)
			return false, nil
		}
		changed := existing.DeepCopy()
		changed.Annotations[cairnv1.RequesterAnnotation] = "changed"
		err := c.Update(ctx, changed, client.DryRunAll)
		if err == nil || (!apierrors.IsForbidden(err) && !apierrors.IsInvalid(err)) ||
			!strings.Contains(err.Error(), cairnv1.RequesterImmutablePolicyName) {
			last = fmt.Sprintf("an update changing the requester answered %v", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the admission policies do not act after %s (last: %s): %w", admissionPoliciesTimeout, last, err)
	}
	return nil
}
