package podvolume

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/restore"
)

// The PodVolumeRestores of a restored pod are bound to the pod the restore created, by the UID
// its create answered, never by its name (DESIGN.md section 20): a tenant who deletes that pod
// and makes one of the same name, its first init container named as the helper, must not
// have the node agent write into it.

var _ restore.CreatedObserver = RestoreAction{}

// Created records, on the PodVolumeRestores of the pod operationID, the UID of the pod the
// restore has just created and its controller, if the create answered one (restore's
// CreatedObserver): the pod the node agent may write into.
func (a RestoreAction) Created(ctx context.Context, operationID string, rs *cairnv1.Restore, created *unstructured.Unstructured) error {
	if created.GetNamespace()+"/"+created.GetName() != operationID || created.GetUID() == "" {
		return fmt.Errorf("the create of pod %s answered %s/%s, UID %q", operationID, created.GetNamespace(), created.GetName(), created.GetUID())
	}
	pvrs, _, _, err := a.podRestores(ctx, operationID, rs)
	if err != nil {
		return err
	}
	if len(pvrs) == 0 {
		return fmt.Errorf("the PodVolumeRestores of pod %s are gone", operationID)
	}
	b := binding{UID: created.GetUID(), Controller: controllerOf(created.GetOwnerReferences())}
	var errs []error
	for i := range pvrs {
		errs = append(errs, a.bind(ctx, &pvrs[i], b))
	}
	return errors.Join(errs...)
}

// Progress binds the pod's PodVolumeRestores to the node of the pod the restore created once
// it is scheduled, then follows them: bytes written while they run, done when all are
// Completed, failed (naming the volume and why) as soon as one fails or is cancelled, or at
// once when the pod of that name is not one the volumes may be written into (decideBinding).
func (a RestoreAction) Progress(ctx context.Context, operationID string, rs *cairnv1.Restore) (backup.OperationProgress, error) {
	pvrs, namespace, name, err := a.podRestores(ctx, operationID, rs)
	if err != nil {
		return backup.OperationProgress{}, err
	}
	p := backup.OperationProgress{Units: backup.UnitsBytes, Description: fmt.Sprintf("volumes of pod %s", operationID)}
	if len(pvrs) == 0 {
		p.Err = fmt.Sprintf("the PodVolumeRestores of pod %s are gone", operationID)
		return p, nil
	}
	if !unbound(pvrs) {
		return progressOfRestores(p, pvrs), nil
	}
	var live *corev1.Pod
	var pod corev1.Pod
	switch err := a.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pod); {
	case err == nil:
		live = &pod
	case !apierrors.IsNotFound(err):
		return p, err
	}
	scheduled := true
	for i := range pvrs {
		if pvrs[i].Spec.Node != "" {
			continue
		}
		b := decideBinding(operationID, recordOf(&pvrs[i].Spec), live)
		if b.Refused != "" {
			p.Err = b.Refused
			return p, nil
		}
		if err := a.bind(ctx, &pvrs[i], b); err != nil {
			return p, err
		}
		scheduled = scheduled && b.Node != ""
	}
	if !scheduled {
		p.Description = fmt.Sprintf("volumes of pod %s: waiting for the pod to be scheduled", operationID)
		return p, nil
	}
	return progressOfRestores(p, pvrs), nil
}

// podRecord is what a PodVolumeRestore records of the pod the restore created.
type podRecord struct {
	UID        types.UID
	Controller *cairnv1.ControllerReference
}

func recordOf(spec *cairnv1.PodVolumeRestoreSpec) podRecord {
	return podRecord{UID: spec.Pod.UID, Controller: spec.PodController}
}

// binding is what an unbound PodVolumeRestore is to say of the pod it writes into: its UID,
// the controller the restore knows it by, and its node ("" until it is scheduled); or, when
// Refused is set, why it writes into no pod.
type binding struct {
	UID        types.UID
	Controller *cairnv1.ControllerReference
	Node       string
	Refused    string
}

// decideBinding decides which pod the unbound PodVolumeRestore of recorded may write into,
// given live, the pod now under the restored pod's name podName (nil: none):
//   - the pod the restore created (recorded.UID), as long as its first init container is the
//     restore helper; the controller that adopted it since is recorded;
//   - a pod made in its place by the controller recorded (the same controller UID, from its
//     ownerReferences, not from the name), whose first init container is the restore helper:
//     a ReplicaSet's or StatefulSet's replacement, the one it is moved to;
//   - never any other pod: one made by hand in its place, whatever its init containers, is
//     refused, and so is every pod when the restore recorded no UID (an older Cairn's record,
//     or a pod that existed already).
func decideBinding(podName string, recorded podRecord, live *corev1.Pod) binding {
	if recorded.UID == "" {
		return binding{Refused: fmt.Sprintf("the restore recorded no UID of a pod %s it created (the pod existed already, or the restore was started by an older Cairn or stopped between creating the pod and recording it): its volumes are not written into a pod known only by its name", podName)}
	}
	if live == nil {
		return binding{Refused: fmt.Sprintf("pod %s is gone before its volumes were restored", podName)}
	}
	controller := controllerOf(live.OwnerReferences)
	if live.UID != recorded.UID {
		if recorded.Controller == nil || controller == nil || controller.UID != recorded.Controller.UID {
			return binding{Refused: fmt.Sprintf("pod %s was replaced after the restore created it: its volumes are not restored into the pod that has its name now", podName)}
		}
		if !waitsForData(live) {
			return binding{Refused: fmt.Sprintf("pod %s was replaced by its controller %s %s with a pod that has no %s init container: its volumes are not restored", podName, controller.Kind, controller.Name, RestoreHelperContainer)}
		}
	} else if !waitsForData(live) {
		// Never write under a running application: this pod would not wait for its data.
		return binding{Refused: fmt.Sprintf("pod %s has no %s init container (it is not the pod the restore created): its volumes are not restored", podName, RestoreHelperContainer)}
	}
	if recorded.Controller != nil {
		controller = recorded.Controller
	}
	return binding{UID: live.UID, Controller: controller, Node: live.Spec.NodeName}
}

// controllerOf is the controller among refs, nil when none is.
func controllerOf(refs []metav1.OwnerReference) *cairnv1.ControllerReference {
	for _, r := range refs {
		if r.Controller != nil && *r.Controller {
			return &cairnv1.ControllerReference{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID}
		}
	}
	return nil
}

// waitsForData reports whether pod's first init container is the restore helper.
func waitsForData(pod *corev1.Pod) bool {
	return len(pod.Spec.InitContainers) > 0 && pod.Spec.InitContainers[0].Name == RestoreHelperContainer
}

func unbound(pvrs []cairnv1.PodVolumeRestore) bool {
	for _, p := range pvrs {
		if p.Spec.Node == "" {
			return true
		}
	}
	return false
}

// bind writes b into the PodVolumeRestore p when it says something new: the pod's UID and
// controller, and once the pod is scheduled its node, with the node's label that the node
// agent selects by.
func (a RestoreAction) bind(ctx context.Context, p *cairnv1.PodVolumeRestore, b binding) error {
	controller := p.Spec.PodController
	if controller == nil {
		controller = b.Controller
	}
	node := b.Node
	if node == "" {
		node = p.Spec.Node // never unset: the node agent there may have begun
	}
	if p.Spec.Pod.UID == b.UID && reflect.DeepEqual(p.Spec.PodController, controller) && p.Spec.Node == node {
		return nil
	}
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	p.Spec.Pod.UID, p.Spec.PodController, p.Spec.Node = b.UID, controller, node
	if node != "" {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[cairnv1.PodVolumeNodeLabel] = backup.LabelValue(node)
	}
	if err := a.Client.Patch(ctx, p, patch); err != nil {
		return fmt.Errorf("binding PodVolumeRestore %s to pod %s/%s (UID %s) on node %q: %w", p.Name, p.Spec.Pod.Namespace, p.Spec.Pod.Name, b.UID, node, err)
	}
	return nil
}
