// Package chartobjects holds the reconciler that applies the storage locations and schedules
// the Helm chart declares (--chart-objects); it owns no phase and no status.
package chartobjects

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/lifecycle"
)

// The chart's objects: the storage locations and schedules that the Helm chart's values declare
// reach the manager as a ConfigMap (--chart-objects), and the manager applies them. Helm cannot
// create them itself in the step that creates their CRDs, and a post-install hook races the API
// server's discovery of the new CRDs (docs/install.md, "Storage locations and schedules").
const (
	// ConfigMapKey is the ConfigMap's key holding the objects, as YAML documents.
	ConfigMapKey = "objects.yaml"
	// FieldOwner is the server-side apply field manager of the chart's objects.
	FieldOwner = "cairn-chart"
	// HashAnnotation is the hash of the declaration an object was last applied from:
	// an object is applied again only when its declaration changes, so a change made with
	// kubectl stays until the values change that object.
	HashAnnotation = "cairn.dev/chart-object-hash"
)

// chartObjectKinds are what the chart may declare; anything else in the ConfigMap is refused.
var chartObjectKinds = []string{"BackupStorageLocation", "Schedule"}

// Reconciler applies the chart's storage locations and schedules (above): when its
// ConfigMap changes, and as a startup recovery step when the manager starts leading (before the
// queue judges any backup), it creates each declared object that is missing and updates, with
// server-side apply, each whose declaration changed. It owns no phase and no status field; objects dropped from the ConfigMap are left alone, as Helm leaves
// the objects of a hook. A declaration it cannot apply is a Warning event on the ConfigMap,
// retried with backoff; the others are applied regardless. Each object's events are related to
// it (events of one reason and regarding object are otherwise merged into one series).
type Reconciler struct {
	client.Client
	// Namespace is the operator's namespace, which holds the ConfigMap and every object in it.
	Namespace string
	// ConfigMap names the ConfigMap (--chart-objects).
	ConfigMap string
	Recorder  events.EventRecorder
	// Gate is the startup recovery, whose step (lifecycle.RecoveryStep) applies the objects first; the
	// reconciler waits for it rather than apply them a second time beside it.
	Gate interface{ Wait(context.Context) error }
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch,namespace=cairn-system
// +kubebuilder:rbac:groups=cairn.dev,resources=backupstoragelocations;schedules,verbs=get;create;patch,namespace=cairn-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile applies the objects that the ConfigMap declares and that are missing or changed.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	if err := r.Gate.Wait(ctx); err != nil {
		return ctrl.Result{}, err
	}
	_, err := r.applyAll(ctx)
	return ctrl.Result{}, err
}

// chartObjectsStartupTimeout bounds the startup step: an API server that stalls must not keep
// the recovery gate shut; the reconciler goes on retrying.
const chartObjectsStartupTimeout = 30 * time.Second

// lifecycle.RecoveryStep applies the chart's objects when the manager starts leading, before any backup
// is judged, and waits until the manager's cache holds the storage locations among them: a
// backup made just after the install finds the chart's default location (the queue reads
// locations from the cache). It never stops the manager and gives up after
// chartObjectsStartupTimeout; what it could not apply, the reconciler retries.
func (r *Reconciler) RecoveryStep() lifecycle.RecoveryStep {
	return lifecycle.RecoveryStep{Name: "apply the chart's storage locations and schedules", Run: func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, chartObjectsStartupTimeout)
		defer cancel()
		log := ctrl.LoggerFrom(ctx)
		objects, err := r.applyAll(ctx)
		if err != nil {
			log.Error(err, "Could not apply the chart's objects at start; retrying")
		}
		for _, obj := range objects {
			if obj.GetKind() != "BackupStorageLocation" {
				continue
			}
			key := client.ObjectKeyFromObject(obj)
			err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				return r.Get(ctx, key, &cairnv1.BackupStorageLocation{}) == nil, nil
			})
			if err != nil {
				log.Error(err, "The chart's storage location is not in the cache yet", "name", key.Name)
				return nil
			}
		}
		return nil
	}}
}

// applyAll applies every declaration of the ConfigMap that is missing or changed, and returns
// the declarations; a missing ConfigMap declares nothing.
func (r *Reconciler) applyAll(ctx context.Context) ([]*unstructured.Unstructured, error) {
	log := ctrl.LoggerFrom(ctx)
	var cm corev1.ConfigMap
	if err := r.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.ConfigMap}, &cm); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	objects, err := Decode(cm.Data[ConfigMapKey], r.Namespace)
	if err != nil {
		// The chart renders valid objects; a hand-edited ConfigMap waits for its next edit.
		r.Recorder.Eventf(&cm, nil, corev1.EventTypeWarning, "InvalidChartObjects", "Apply", "%s: %v", ConfigMapKey, err)
		log.Error(err, "Could not read the chart's objects", "configMap", lifecycle.ObjectName(&cm))
		return nil, nil
	}
	var failed []error
	for _, obj := range objects {
		applied, err := r.apply(ctx, obj)
		switch {
		case err != nil:
			err = fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
			r.Recorder.Eventf(&cm, obj, corev1.EventTypeWarning, "ChartObjectFailed", "Apply", "%v", err)
			failed = append(failed, err)
		case applied:
			log.Info("Applied an object of the chart", "kind", obj.GetKind(), "name", obj.GetName())
			r.Recorder.Eventf(&cm, obj, corev1.EventTypeNormal, "ChartObjectApplied", "Apply", "Applied %s %s", obj.GetKind(), obj.GetName())
		}
	}
	return objects, errors.Join(failed...)
}

// apply creates or updates obj unless the object in the cluster was applied from the same
// declaration; it says whether it wrote.
func (r *Reconciler) apply(ctx context.Context, obj *unstructured.Unstructured) (bool, error) {
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(obj.GroupVersionKind())
	err := r.Get(ctx, client.ObjectKeyFromObject(obj), current)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	if err == nil && current.GetAnnotations()[HashAnnotation] == obj.GetAnnotations()[HashAnnotation] {
		return false, nil
	}
	return true, r.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldOwner), client.ForceOwnership)
}

// Decode reads the YAML documents of a chart objects ConfigMap: each must be a storage
// location or a schedule of cairn.dev/v1alpha1 in namespace (or name none), with only
// metadata's name, namespace, labels and annotations, and a spec. Each comes back in namespace
// with its declaration's hash annotated (HashAnnotation). Empty documents are skipped; two
// documents for the same object are refused.
func Decode(data, namespace string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(data), 4096)
	var objects []*unstructured.Unstructured
	seen := map[string]bool{}
	for i := 1; ; i++ {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return objects, nil
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(doc) == 0 {
			continue
		}
		obj, err := chartObject(doc, namespace)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		key := obj.GetKind() + "/" + obj.GetName()
		if seen[key] {
			return nil, fmt.Errorf("document %d: %s %s is declared twice", i, obj.GetKind(), obj.GetName())
		}
		seen[key] = true
		objects = append(objects, obj)
	}
}

// chartObject checks one declaration and returns it as an object to apply.
func chartObject(doc map[string]any, namespace string) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{Object: doc}
	if obj.GetAPIVersion() != cairnv1.GroupVersion.String() || !slices.Contains(chartObjectKinds, obj.GetKind()) {
		return nil, fmt.Errorf("%s %s is not a kind the chart declares (%s of %s)", obj.GetAPIVersion(), obj.GetKind(),
			strings.Join(chartObjectKinds, ", "), cairnv1.GroupVersion)
	}
	for field := range doc {
		if !slices.Contains([]string{"apiVersion", "kind", "metadata", "spec"}, field) {
			return nil, fmt.Errorf("%s: field %q is not applied (only metadata and spec)", obj.GetKind(), field)
		}
	}
	metadata, ok := doc["metadata"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: no metadata", obj.GetKind())
	}
	for field := range metadata {
		if !slices.Contains([]string{"name", "namespace", "labels", "annotations"}, field) {
			return nil, fmt.Errorf("%s: metadata.%s is not applied (only name, namespace, labels and annotations)", obj.GetKind(), field)
		}
	}
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s: no metadata.name", obj.GetKind())
	}
	if ns := obj.GetNamespace(); ns != "" && ns != namespace {
		return nil, fmt.Errorf("%s %s: namespace %q is not the manager's (%s)", obj.GetKind(), obj.GetName(), ns, namespace)
	}
	if _, ok := doc["spec"].(map[string]any); !ok {
		return nil, fmt.Errorf("%s %s: no spec", obj.GetKind(), obj.GetName())
	}
	obj.SetNamespace(namespace)
	hash, err := declarationHash(obj)
	if err != nil {
		return nil, err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[HashAnnotation] = hash
	obj.SetAnnotations(annotations)
	return obj, nil
}

// declarationHash is the SHA-256 of an object's JSON (maps marshal with sorted keys), without
// its own hash annotation.
func declarationHash(obj *unstructured.Unstructured) (string, error) {
	c := obj.DeepCopy()
	if a := c.GetAnnotations(); a != nil {
		delete(a, HashAnnotation)
		if len(a) == 0 {
			a = nil
		}
		c.SetAnnotations(a)
	}
	data, err := json.Marshal(c.Object)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16]), nil
}

// SetupWithManager watches the one ConfigMap; the manager's cache holds only the ConfigMaps of
// its namespace (CacheOptions). Starting to lead reconciles it once, which creates what is
// missing.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	isOurs := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == r.Namespace && o.GetName() == r.ConfigMap
	})
	return lifecycle.Register("chartobjects", ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}, builder.WithPredicates(isOurs)),
		r)
}
