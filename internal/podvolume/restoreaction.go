package podvolume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/backup"
	"github.com/cairn-backup/cairn/internal/hooks"
	"github.com/cairn-backup/cairn/internal/restore"
	"github.com/cairn-backup/cairn/internal/velerofmt"
)

// RestoreActionName is the name of the restore action in a restore's recorded operations.
const RestoreActionName = "cairn.dev/pod-volume-restore"

// RestoreAnnotation on a PodVolumeRestore is "<namespace>/<name>" of its restore.
const RestoreAnnotation = "cairn.dev/restore"

// RestoreAction writes the backed-up data of a restored pod's volumes back (DESIGN.md section
// 16). For a pod whose volumes the backup copied, it adds the restore helper as the pod's first
// init container (with the emptyDir it waits in), and creates one PodVolumeRestore per volume
// in the operator's namespace; the pod's restore is one async operation, answered from them.
// It is also the one place that orders a restored pod's init containers: the restore's init
// hooks (section 17) go right after the helper.
// A PodVolumeRestore is made before its pod exists, so it names no pod UID and no node yet:
// Created records the UID the pod's create answered, Progress binds it to the node of that
// pod (never of another pod of its name, binding.go) once it is scheduled, and the node agent
// there writes the data while the helper holds the application back.
type RestoreAction struct {
	// Client creates and updates PodVolumeRestores with the manager's rights; Reader reads
	// them and the restored pods, uncached.
	Client    client.Client
	Reader    client.Reader
	Namespace string
	// HelperImage is the image of the restore helper: the manager's own.
	HelperImage string
	// Repositories says whether a repository can be read here: its password is known.
	Repositories interface {
		Readable(ctx context.Context, ref cairnv1.RepositoryReference) error
	}
}

func (RestoreAction) Name() string { return RestoreActionName }

func (RestoreAction) AppliesTo() []schema.GroupResource { return []schema.GroupResource{podsGR} }

// restoredVolumes are the snapshots of the backed-up pod namespace/name, by volume, that a
// restore may write: those of the pod's own namespace's repository, read in the backup's own
// location. The record names the location as the cluster that made the backup calls it; a
// second cluster restoring from the same storage may call it otherwise, and the repository is
// in that storage whatever its name: so the record's location is replaced by the backup's
// location here (location), and never chooses where the data is read. A record of another
// namespace's repository (which storage holds, and whoever can write the bucket could change)
// is refused: a restore never reads another namespace's repository.
// Each is written only if the repository's snapshot is of that volume (DESIGN.md section 20):
// tagged as the backup tagged that volume's copies (Tags: the claim's UID, or the pod's
// namespace and name as backed up and the volume's), whatever identity the record says, so
// that a record changed in the bucket cannot write another volume's snapshot into the pod.
func restoredVolumes(ops []backup.Operation, namespace, name, location string) (map[string]Snapshot, []string, error) {
	snaps, err := Snapshots(ops)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]Snapshot{}
	var refused []string
	for _, s := range snaps {
		if s.Pod.Namespace != namespace || s.Pod.Name != name {
			continue
		}
		if s.Repository.Namespace != namespace {
			refused = append(refused, fmt.Sprintf("volume %s: its snapshot is in the repository for namespace %s, not the pod's", s.Volume, s.Repository.Namespace))
			continue
		}
		s.Repository.StorageLocation = location
		s.Source, s.SourceTags = "", Tags(cairnv1.PodReference{Namespace: namespace, Name: name}, s.Volume, s.PersistentVolumeClaimUID)
		out[s.Volume] = s
	}
	return out, refused, nil
}

// recordFits checks the backup's record of a volume's snapshot s against the pod as backed up
// (its volume of that name): a claim's copy for a claim volume (the same claim), an emptyDir's
// for an emptyDir. The identity a restore asks of the snapshot (restoredVolumes) follows the
// record, so a record that says a claim where the pod had an emptyDir is refused here.
func recordFits(pod *corev1.Pod, s Snapshot) error {
	for _, v := range pod.Spec.Volumes {
		if v.Name != s.Volume {
			continue
		}
		claim := ""
		switch {
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = pod.Name + "-" + v.Name
		}
		switch {
		case claim == "" && s.PersistentVolumeClaimUID != "":
			return fmt.Errorf("volume %s: the record names a copy of claim %s, but the pod's volume is no claim", s.Volume, s.PersistentVolumeClaim)
		case claim != "" && (s.PersistentVolumeClaimUID == "" || s.PersistentVolumeClaim != claim):
			return fmt.Errorf("volume %s: the record names a copy of claim %q, but the pod's volume is claim %s", s.Volume, s.PersistentVolumeClaim, claim)
		}
		return nil
	}
	return fmt.Errorf("volume %s: the pod as backed up has no volume of that name", s.Volume)
}

// veleroRestoredVolumes are the snapshots of the backed-up pod namespace/name, by volume, that
// Velero's file-system backup took (copied: its PodVolumeBackups, velerofmt.CopiedVolumes):
// read from Velero's kopia repository of the pod's own namespace (Velero keeps one per
// namespace under <prefix>/kopia/<namespace>/, the layout of Cairn's), in the backup's
// location, and written only if the snapshot is of that pod (its source path, or for Velero
// before v1.17 its tags, which the repository's key authenticates: a record changed by someone
// who can write the bucket cannot restore another pod's data, even one of a repository that
// shares Velero's password).
// Volumes that restic copied are refused: restic repositories are another format.
func veleroRestoredVolumes(copied []velerofmt.PodVolumeBackup, namespace, name, location string) (map[string]Snapshot, []string) {
	out := map[string]Snapshot{}
	var refused []string
	for _, p := range copied {
		if p.Spec.Pod.Namespace != namespace || p.Spec.Pod.Name != name {
			continue
		}
		if u := p.Uploader(); u != velerofmt.UploaderKopia {
			refused = append(refused, fmt.Sprintf("volume %s was copied by Velero's %s uploader (snapshot %s), whose repositories Cairn cannot read", p.Spec.Volume, u, p.Status.SnapshotID))
			continue
		}
		out[p.Spec.Volume] = Snapshot{
			Pod: cairnv1.PodReference{Namespace: namespace, Name: name}, Volume: p.Spec.Volume,
			Repository: cairnv1.RepositoryReference{StorageLocation: location, Namespace: namespace},
			SnapshotID: p.Status.SnapshotID,
			Source:     velerofmt.SnapshotSourcePrefix(namespace, name), SourceTags: velerofmt.SnapshotTags(namespace, name),
		}
	}
	return out, refused
}

// Execute prepares a restored pod: the restore helper and its PodVolumeRestores when the
// backup copied its volumes, then the pod's init hooks (internal/hooks), placed after the
// helper so that they see the restored data, and before the pod's own init containers. A pod
// without copied volumes gets its init hooks all the same; a hook that cannot be read is an
// error of the item, the pod still restored without it.
func (a RestoreAction) Execute(ctx context.Context, in restore.ActionInput) (restore.ActionOutput, error) {
	out := restore.ActionOutput{Item: in.Item}
	if in.Facts.Restore == nil {
		return out, nil
	}
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(in.Item.Object, &pod); err != nil {
		return out, err
	}
	initHooks, hookErrs := hooks.SelectRestoreInit(&pod, in.Facts.Restore.Spec.Hooks)
	for _, err := range hookErrs {
		out.Errors = append(out.Errors, fmt.Sprintf("init hooks not added: %v", err))
	}
	snaps, err := a.snapshots(ctx, in)
	if err != nil {
		return out, err
	}
	if len(snaps) == 0 && len(initHooks) == 0 {
		return out, nil
	}
	names := slices.Sorted(maps.Keys(snaps))
	if len(snaps) > 0 {
		if err := a.prepareVolumes(ctx, &pod, names, snaps); err != nil {
			return out, err
		}
		withHelper(&pod, a.HelperImage, names, in.Facts.Restore)
	}
	if len(initHooks) > 0 {
		if pod.Spec.InitContainers, err = hooks.WithInitHooks(&pod, RestoreHelperContainer, initHooks); err != nil {
			return out, err
		}
		added := make([]string, len(initHooks))
		for i, c := range initHooks {
			added[i] = c.Name
		}
		out.Notes = append(out.Notes, fmt.Sprintf("Added the init hook containers %s", strings.Join(added, ", ")))
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pod)
	if err != nil {
		return out, err
	}
	out.Item = &unstructured.Unstructured{Object: obj}
	if len(snaps) == 0 {
		return out, nil
	}
	source := &cairnv1.PodReference{Namespace: in.Original.GetNamespace(), Name: in.Original.GetName(), UID: in.Original.GetUID()}
	for _, v := range names {
		if err := a.create(ctx, in.Facts.Restore, pod.Namespace, pod.Name, source, snaps[v]); err != nil {
			return out, err
		}
	}
	out.OperationID = pod.Namespace + "/" + pod.Name
	return out, nil
}

// snapshots are the backed-up pod's volume snapshots this restore writes back (none when the
// backup copied none of its volumes): from the backup's operations, or for a Velero backup
// from Velero's record of its PodVolumeBackups.
func (a RestoreAction) snapshots(ctx context.Context, in restore.ActionInput) (map[string]Snapshot, error) {
	if in.Facts.VeleroVolumes != nil {
		copied, err := in.Facts.VeleroVolumes(ctx, in.Original.GetNamespace(), in.Original.GetName())
		if err != nil {
			return nil, err
		}
		snaps, refused := veleroRestoredVolumes(copied, in.Original.GetNamespace(), in.Original.GetName(), in.Facts.BackupLocation)
		if len(refused) > 0 {
			// The pod is not made: an application never starts on volumes left empty.
			return nil, fmt.Errorf("the pod's volume data, copied by Velero's file-system backup, cannot be restored (docs/migrating-from-velero.md, \"Volume data\"): %s",
				strings.Join(refused, "; "))
		}
		return snaps, nil
	}
	if in.Facts.BackupOperations == nil {
		return nil, nil
	}
	ops, err := in.Facts.BackupOperations(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the backup's volume snapshots: %w", err)
	}
	snaps, refused, err := restoredVolumes(ops, in.Original.GetNamespace(), in.Original.GetName(), in.Facts.BackupLocation)
	if err != nil {
		return nil, err
	}
	var original corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(in.Original.Object, &original); err != nil {
		return nil, err
	}
	for _, v := range slices.Sorted(maps.Keys(snaps)) {
		if err := recordFits(&original, snaps[v]); err != nil {
			refused = append(refused, err.Error())
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("the backup's record of the pod's volume data is refused: %s", strings.Join(refused, "; "))
	}
	return snaps, nil
}

// prepareVolumes checks that the pod's volumes named can take their data back: the helper
// image known, each a claim or emptyDir of the pod, the helper's volume name free, each
// repository readable.
func (a RestoreAction) prepareVolumes(ctx context.Context, pod *corev1.Pod, names []string, snaps map[string]Snapshot) error {
	if a.HelperImage == "" {
		return errors.New("the pod's volume data cannot be restored: the manager was started without --restore-helper-image")
	}
	for _, v := range names {
		if !hasDataVolume(pod, v) {
			return fmt.Errorf("the pod has no claim or emptyDir volume %s to restore the backed-up data into", v)
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == RestoreMarkerVolume {
			return fmt.Errorf("the pod already has a volume named %s, which the restore needs", RestoreMarkerVolume)
		}
	}
	for _, v := range names {
		if err := a.Repositories.Readable(ctx, snaps[v].Repository); err != nil {
			return fmt.Errorf("the data of volume %s cannot be restored: %w", v, err)
		}
	}
	return nil
}

// hasDataVolume reports whether pod has a claim or emptyDir volume named name.
func hasDataVolume(pod *corev1.Pod, name string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.EmptyDir != nil
		}
	}
	return false
}

// withHelper adds the restore helper to pod: the marker emptyDir, and the first init container
// waiting for volumes, bounded by the restore's itemOperationTimeout. It runs as an unprivileged
// user with nothing writable but its marker directory, which it only reads.
func withHelper(pod *corev1.Pod, image string, volumes []string, rs *cairnv1.Restore) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: RestoreMarkerVolume, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))}}})
	helper := corev1.Container{
		Name:    RestoreHelperContainer,
		Image:   image,
		Command: []string{"/manager"},
		Args: []string{"restore-helper", "--volumes=" + strings.Join(volumes, ","),
			"--timeout=" + rs.Spec.GetItemOperationTimeout().String()},
		VolumeMounts:             []corev1.VolumeMount{{Name: RestoreMarkerVolume, MountPath: RestoreMarkerMountPath, ReadOnly: true}},
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	pod.Spec.InitContainers = append([]corev1.Container{helper}, pod.Spec.InitContainers...)
}

// RestoreName is the name of the PodVolumeRestore of a restored pod's volume.
func RestoreName(restoreName string, restoreUID, namespace, pod, volume string) string {
	sum := sha256.Sum256([]byte(restoreUID + "/" + namespace + "/" + pod + "/" + volume))
	prefix := restoreName
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], ".-")
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:12]
}

// create creates the PodVolumeRestore of one volume (again after a retried Execute: the same
// name, already there, is fine).
func (a RestoreAction) create(ctx context.Context, rs *cairnv1.Restore, namespace, pod string, source *cairnv1.PodReference, snap Snapshot) error {
	pvr := &cairnv1.PodVolumeRestore{
		ObjectMeta: metav1.ObjectMeta{
			Name:      RestoreName(rs.Name, string(rs.UID), namespace, pod, snap.Volume),
			Namespace: a.Namespace,
			Labels: map[string]string{
				cairnv1.PodVolumeRestoreNameLabel: backup.LabelValue(rs.Name),
				cairnv1.PodVolumeRestoreUIDLabel:  string(rs.UID),
				cairnv1.PodVolumeRepositoryLabel:  backup.LabelValue(snap.Repository.Key()),
			},
			Annotations: map[string]string{RestoreAnnotation: rs.Namespace + "/" + rs.Name},
		},
		Spec: cairnv1.PodVolumeRestoreSpec{
			Pod: cairnv1.PodReference{Namespace: namespace, Name: pod}, Volume: snap.Volume, SourcePod: source,
			Repository: snap.Repository, SnapshotID: snap.SnapshotID,
			SnapshotSource: snap.Source, SnapshotTags: snap.SourceTags,
		},
	}
	if err := a.Client.Create(ctx, pvr); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the PodVolumeRestore of volume %s: %w", snap.Volume, err)
	}
	return nil
}

// podRestores are the PodVolumeRestores of the restored pod operationID ("<namespace>/<pod>"),
// read uncached: Created runs right after Execute made them, before the cache need have seen
// them, and a pod whose records were missed would never be bound.
func (a RestoreAction) podRestores(ctx context.Context, operationID string, rs *cairnv1.Restore) ([]cairnv1.PodVolumeRestore, string, string, error) {
	namespace, pod, ok := strings.Cut(operationID, "/")
	if !ok {
		return nil, "", "", fmt.Errorf("malformed operation ID %q", operationID)
	}
	var list cairnv1.PodVolumeRestoreList
	if err := a.Reader.List(ctx, &list, client.InNamespace(a.Namespace), client.MatchingLabels{cairnv1.PodVolumeRestoreUIDLabel: string(rs.UID)}); err != nil {
		return nil, "", "", err
	}
	var out []cairnv1.PodVolumeRestore
	for _, p := range list.Items {
		if p.Spec.Pod.Namespace == namespace && p.Spec.Pod.Name == pod {
			out = append(out, p)
		}
	}
	return out, namespace, pod, nil
}

// progressOfRestores is what a pod's PodVolumeRestores say, as one operation's progress.
func progressOfRestores(p backup.OperationProgress, pvrs []cairnv1.PodVolumeRestore) backup.OperationProgress {
	completed := 0
	var failures []string
	for _, r := range pvrs {
		p.NCompleted += r.Status.BytesDone
		p.NTotal += max(r.Status.BytesTotal, r.Status.BytesDone)
		if t := r.Status.StartTimestamp; t != nil && (p.Started.IsZero() || t.Time.Before(p.Started)) {
			p.Started = t.Time
		}
		switch r.Status.Phase {
		case cairnv1.PodVolumePhaseCompleted:
			completed++
		case cairnv1.PodVolumePhaseFailed, cairnv1.PodVolumePhaseCancelled:
			failures = append(failures, fmt.Sprintf("volume %s: %s", r.Spec.Volume, messageOr(r.Status.Message, string(r.Status.Phase))))
		}
	}
	slices.Sort(failures)
	switch {
	case len(failures) > 0:
		p.Err = "restoring " + p.Description + ": " + strings.Join(failures, "; ")
	case completed == len(pvrs):
		p.Completed = true
	}
	return p
}

// Cancel stops the restores of the pod's volumes (CancelRestores).
func (a RestoreAction) Cancel(ctx context.Context, operationID string, rs *cairnv1.Restore) error {
	pvrs, _, _, err := a.podRestores(ctx, operationID, rs)
	if err != nil {
		return err
	}
	return CancelRestores(ctx, a.Client, pvrs)
}

// CancelRestores stops the volume restores of pvrs that have not ended: one bound to a node is
// cancelled (its agent stops it and tells the pod, whose helper fails), one not bound yet is
// deleted (no agent will ever see it; its pod, if any, is never scheduled onto data).
func CancelRestores(ctx context.Context, c client.Client, pvrs []cairnv1.PodVolumeRestore) error {
	var errs []error
	for i := range pvrs {
		p := &pvrs[i]
		switch {
		case p.Status.Phase.IsTerminal() || p.Spec.Cancel:
		case p.Spec.Node == "":
			errs = append(errs, client.IgnoreNotFound(c.Delete(ctx, p)))
		default:
			patch := client.MergeFrom(p.DeepCopy())
			p.Spec.Cancel = true
			errs = append(errs, client.IgnoreNotFound(c.Patch(ctx, p, patch)))
		}
	}
	return errors.Join(errs...)
}

// RestoreOf is the restore a PodVolumeRestore writes for, from its RestoreAnnotation.
func RestoreOf(obj client.Object) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(obj.GetAnnotations()[RestoreAnnotation], "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}
