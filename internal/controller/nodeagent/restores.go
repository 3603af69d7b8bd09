package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/confined"
	"github.com/cairn-backup/cairn/internal/metrics"
	"github.com/cairn-backup/cairn/internal/phases"
	"github.com/cairn-backup/cairn/internal/podvolume"
	"github.com/cairn-backup/cairn/internal/repository"
	"github.com/cairn-backup/cairn/internal/volumes"
)

// volumeWait is how often a restore looks for a restored pod's volume directories, which the
// kubelet makes once the pod is scheduled, before its init containers start.
const volumeWait = time.Second

// restores is the kind of PodVolumeRestores: the agent writes a snapshot into the restored
// pod's volume, then tells the pod's restore helper (podvolume's markers).
func restores(a *Agent) kind[*cairnv1.PodVolumeRestore] {
	return kind[*cairnv1.PodVolumeRestore]{
		name:  "podvolumerestore",
		table: phases.PodVolumeRestore,
		new:   func() *cairnv1.PodVolumeRestore { return &cairnv1.PodVolumeRestore{} },
		messages: messages{
			restarted:       "the node agent restarted during the restore; the volume may hold part of the data",
			cancelledBefore: "cancelled before the restore started",
			cancelled:       "cancelled during the restore; the volume may hold part of the data",
			stopped:         "the node agent stopped during the restore; the volume may hold part of the data",
		},
		work: a.restore,
		completed: func(s *cairnv1.PodVolumeStatus, o outcome) {
			s.BytesDone, s.BytesTotal, s.Files = o.Bytes, o.Bytes, o.Files
			s.Progress = progressSummary(o.Bytes, o.Bytes)
		},
		ended: a.mark,
		observe: func(phase cairnv1.PodVolumePhase, d time.Duration, o outcome) {
			metrics.VolumeRestoreEnded(string(phase), d, o.Bytes)
		},
	}
}

// restore waits for the restored pod's volume and marker directories, then writes the
// snapshot into the volume: over what it holds, only for the files the snapshot has.
func (a *Agent) restore(ctx context.Context, pvr *cairnv1.PodVolumeRestore, p *progress) (outcome, error) {
	if err := restoredPodKnown(pvr.Spec.Pod); err != nil {
		return outcome{}, err
	}
	if err := a.waitForHelper(ctx, pvr.Spec.Pod); err != nil {
		return outcome{}, err
	}
	vol, err := a.waitForVolume(ctx, pvr.Spec.Pod, pvr.Spec.Volume)
	if err != nil {
		return outcome{}, err
	}
	if err := a.waitForMarkerDir(ctx, pvr); err != nil {
		return outcome{}, err
	}
	repo, err := a.open(ctx, pvr.Spec.Repository, true)
	if err != nil {
		return outcome{}, fmt.Errorf("opening the volume repository of location %s for namespace %s: %w",
			pvr.Spec.Repository.StorageLocation, pvr.Spec.Repository.Namespace, err)
	}
	defer func() { _ = repo.Close() }()
	log := ctrl.LoggerFrom(ctx).WithValues("podvolumerestore", pvr.Name)
	res, err := repo.Restore(ctx, pvr.Spec.SnapshotID, vol.Dir, repository.RestoreOptions{
		Overwrite: true, Parallel: a.RestoreParallelism, Capacity: vol.Capacity, PodUser: vol.User,
		Dropped: func(path string, mode os.FileMode) {
			log.Info("Dropped the setuid and setgid bits of a file not owned by the pod's own user", "path", path, "mode", mode.String())
		},
		Of:       repository.SnapshotIdentity{SourcePrefix: pvr.Spec.SnapshotSource, Tags: pvr.Spec.SnapshotTags},
		Progress: func(done, total int64) { p.done.Store(done); p.total.Store(total) },
	})
	if errors.Is(err, confined.ErrOverBudget) {
		err = fmt.Errorf("volume %s holds at most %s: %w", pvr.Spec.Volume, cairnv1.HumanBytes(vol.Capacity), err)
	}
	return outcome{Bytes: res.Bytes, Files: res.Files}, err
}

// waitForHelper waits until the restored pod's restore helper runs: the kubelet starts init
// containers only once every volume of the pod is mounted, so from then on the volume's
// directory is the volume itself, not the empty mount point the kubelet makes just before it
// mounts a claim there (data written there would be hidden by the mount).
func (a *Agent) waitForHelper(ctx context.Context, ref cairnv1.PodReference) error {
	for {
		var pod corev1.Pod
		if err := a.Reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &pod); err != nil {
			return fmt.Errorf("reading pod %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		if err := samePod(ref, &pod, restoredPodReplaced); err != nil {
			return err
		}
		running, ended := helperState(&pod)
		switch {
		case running:
			return nil
		case ended:
			return fmt.Errorf("the restore helper of pod %s/%s ended before its data was written", ref.Namespace, ref.Name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for pod %s/%s to mount its volumes: %w", ref.Namespace, ref.Name, ctx.Err())
		case <-time.After(volumeWait):
		}
	}
}

// restoredPodKnown refuses a PodVolumeRestore that names no UID of the pod the restore
// created (DESIGN.md section 20): the agent never writes into a pod known only by its name.
func restoredPodKnown(ref cairnv1.PodReference) error {
	if ref.UID == "" {
		return fmt.Errorf("the PodVolumeRestore names no UID of the pod %s/%s the restore created: nothing is written into a pod known only by its name", ref.Namespace, ref.Name)
	}
	return nil
}

// helperState says whether pod's restore helper runs, or has ended.
func helperState(pod *corev1.Pod) (running, ended bool) {
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == podvolume.RestoreHelperContainer {
			return s.State.Running != nil, s.State.Terminated != nil
		}
	}
	return false, false
}

// waitForVolume waits until the kubelet has made the volume's directory.
func (a *Agent) waitForVolume(ctx context.Context, pod cairnv1.PodReference, volume string) (volumeOnNode, error) {
	for {
		dir, err := a.volumeDir(ctx, pod, volume, restoredPodReplaced)
		var notYet errNotThereYet
		if !errors.As(err, &notYet) {
			return dir, err
		}
		select {
		case <-ctx.Done():
			return volumeOnNode{}, err
		case <-time.After(volumeWait):
		}
	}
}

// markerDir is the restored pod's marker emptyDir on this node.
func (a *Agent) markerDir(pvr *cairnv1.PodVolumeRestore) (string, error) {
	return volumes.HostPath(a.PodsDir, pvr.Spec.Pod.UID, volumes.Volume{Name: podvolume.RestoreMarkerVolume, Kind: volumes.EmptyDir}, "", corev1.PersistentVolumeSource{})
}

// waitForMarkerDir waits until the kubelet has made the pod's marker directory: a pod without
// one (its restore helper removed) would start on whatever the restore has written so far.
func (a *Agent) waitForMarkerDir(ctx context.Context, pvr *cairnv1.PodVolumeRestore) error {
	dir, err := a.markerDir(pvr)
	if err != nil {
		return err
	}
	for {
		_, err := os.Stat(dir)
		if err == nil {
			return nil
		}
		if !os.IsNotExist(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s/%s has no directory %s for its restore helper: %w", pvr.Spec.Pod.Namespace, pvr.Spec.Pod.Name, dir, err)
		case <-time.After(volumeWait):
		}
	}
}

// mark tells the restored pod's restore helper how the volume's restore ended: a done marker,
// or a failed one holding the status message. It is written whole (a rename), never twice, and
// not at all when the pod or its marker directory is gone. The pod's containers can write the
// marker directory: the marker is written beneath a handle on it, through no link (package
// confined), as the volume's data is.
func (a *Agent) mark(ctx context.Context, pvr *cairnv1.PodVolumeRestore) {
	status := pvr.Status
	if !status.Phase.IsTerminal() || pvr.Spec.Pod.UID == "" {
		return
	}
	dir, err := a.markerDir(pvr)
	if err != nil {
		return
	}
	name, content := pvr.Spec.Volume+podvolume.DoneMarkerSuffix, ""
	if status.Phase != cairnv1.PodVolumePhaseCompleted {
		name, content = pvr.Spec.Volume+podvolume.FailedMarkerSuffix, fmt.Sprintf("%s: %s", status.Phase, status.Message)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("podvolumerestore", pvr.Name)
	root, err := confined.OpenRoot(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Info("Could not tell the restored pod how its volume's restore ended", "error", err.Error())
		}
		return
	}
	defer func() { _ = root.Close() }()
	if root.Exists(name) {
		return
	}
	_, err = root.WriteFile(name, strings.NewReader(content), confined.FileOptions{
		Attributes: confined.Attributes{Mode: 0o644, ModTime: time.Now().UnixNano()},
	})
	if err != nil {
		log.Info("Could not tell the restored pod how its volume's restore ended", "error", err.Error())
	}
}
