package backupsync_test

import (
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/archive"
	"github.com/cairn-backup/cairn/internal/backupsync"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
)

// commitElsewhere writes a committed backup into store as another cluster's Backup object
// (UID uid) would have: an archive, and the commit marker the finalizer writes. It returns the
// backup's keys.
func commitElsewhere(store storage.ObjectStore, namespace, name, uid string, spec cairnv1.BackupSpec) storage.BackupKeys {
	GinkgoHelper()
	keys := storage.Layout{}.Backup(namespace, name)
	digest, err := storage.PutArchive(SuiteCtx, store, keys.Archive, strings.NewReader("not really a tar.gz"))
	Expect(err).NotTo(HaveOccurred())
	start := metav1.NewTime(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	expiration := metav1.NewTime(start.Add(24 * time.Hour * 365 * 5))
	origin := &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid),
			Labels: map[string]string{cairnv1.ScheduleNameLabel: "nightly"}},
		Spec: spec,
		Status: cairnv1.BackupStatus{StartTimestamp: &start, Expiration: &expiration, Progress: cairnv1.NewBackupProgress(7, 7),
			Errors: 0, BackupItemOperationsAttempted: 1, BackupItemOperationsCompleted: 1},
	}
	m, err := backupsync.Marker(origin, cairnv1.BackupPhaseCompleted, archive.FormatVersion, digest, start.Add(time.Minute), 2)
	Expect(err).NotTo(HaveOccurred())
	Expect(storage.WriteMetadata(SuiteCtx, store, keys, m)).To(Succeed())
	return keys
}

func dataCondition(namespace, name string) *metav1.Condition {
	GinkgoHelper()
	return meta.FindStatusCondition(GetBackup(namespace, name).Status.Conditions, cairnv1.BackupConditionDataAvailable)
}

var _ = Describe("Sync from storage", Ordered, func() {
	const uidA = "uid-of-cluster-a"
	var (
		store    *storage.Filesystem
		bsl      *cairnv1.BackupStorageLocation
		recorder *PhaseRecorder
	)

	BeforeAll(func() {
		recorder = RecordPhases()
		store, bsl = SyncedLocation("sync-dr", time.Second, cairnv1.AccessModeReadWrite, nil)
		// Everything runs, the queue included: it must leave the synced backups alone. The
		// manager stops before the backups are cleaned up, or the sync would make them again.
		DeferCleanup(DeleteAllBackups)
		stop := StartManager(controller.Config{})
		DeferCleanup(func() { stop() })
		EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
	})

	It("makes a Backup object of each committed backup, terminal from its marker, and the queue never touches it", func() {
		commitElsewhere(store, OperatorNamespace, "from-a", uidA, cairnv1.BackupSpec{IncludedNamespaces: []string{"app"}, StorageLocation: "primary-in-a"})
		b := EventuallySynced(OperatorNamespace, "from-a")

		Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
		Eventually(func() []cairnv1.BackupPhase { return recorder.Of("from-a") }).Should(Equal([]cairnv1.BackupPhase{"", cairnv1.BackupPhaseCompleted}), "only the sync moved it")
		Expect(b.Status.QueuePosition).To(BeZero())
		Expect(meta.FindStatusCondition(b.Status.Conditions, cairnv1.BackupConditionQueued)).To(BeNil())
		Expect(b.Spec.IncludedNamespaces).To(Equal([]string{"app"}))
		Expect(b.Spec.StorageLocation).To(Equal("sync-dr"), "the spec names this cluster's location")
		Expect(b.Annotations).To(HaveKeyWithValue(cairnv1.SyncedFromAnnotation, "sync-dr"))
		Expect(b.Labels).To(HaveKeyWithValue(cairnv1.StorageLocationLabel, "sync-dr"))
		Expect(b.Labels).To(HaveKeyWithValue(cairnv1.ScheduleNameLabel, "nightly"))
		Expect(b.Finalizers).To(ContainElement(cairnv1.BackupDataFinalizer))
		Expect(b.Status.StorageLocation).To(Equal("sync-dr"))
		Expect(b.Status.OriginUID).To(Equal(uidA))
		Expect(b.Status.StartTimestamp.Time).To(BeTemporally("==", time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)))
		Expect(b.Status.CompletionTimestamp.Time).To(BeTemporally("==", time.Date(2026, 1, 2, 3, 1, 0, 0, time.UTC)))
		Expect(b.Status.Expiration).NotTo(BeNil())
		Expect(b.Status.Warnings).To(BeEquivalentTo(2))
		Expect(b.Status.Progress.Summary).To(Equal("7/7"))
		Expect(b.Status.FormatVersion).To(Equal(archive.FormatVersion))
		Expect(meta.IsStatusConditionTrue(b.Status.Conditions, cairnv1.BackupConditionDataAvailable)).To(BeTrue())

		Eventually(func(g Gomega) {
			var got cairnv1.BackupStorageLocation
			g.Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(bsl), &got)).To(Succeed())
			g.Expect(got.Status.LastSyncedTime).NotTo(BeNil())
		}).Should(Succeed())
	})

	It("shows a backup whose marker has no archive, and never one whose archive has no marker", func() {
		keys := commitElsewhere(store, OperatorNamespace, "marker-only", uidA, cairnv1.BackupSpec{})
		Expect(store.Delete(SuiteCtx, keys.Archive)).To(Succeed())
		uncommitted := storage.Layout{}.Backup(OperatorNamespace, "archive-only")
		_, err := storage.PutArchive(SuiteCtx, store, uncommitted.Archive, strings.NewReader("an upload that was never committed"))
		Expect(err).NotTo(HaveOccurred())

		EventuallySynced(OperatorNamespace, "marker-only")
		Consistently(func() *cairnv1.Backup { return FindBackup(OperatorNamespace, "archive-only") }).
			WithTimeout(3 * time.Second).Should(BeNil())
	})

	It("marks a backup whose marker is gone DataAvailable=False, refuses to restore it, and marks it True when the data is back", func() {
		keys := commitElsewhere(store, OperatorNamespace, "orphan", uidA, cairnv1.BackupSpec{})
		EventuallySynced(OperatorNamespace, "orphan")
		Expect(store.Delete(SuiteCtx, keys.Metadata)).To(Succeed())

		Eventually(func(g Gomega) {
			c := dataCondition(OperatorNamespace, "orphan")
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(cairnv1.ReasonNotFoundInStorage))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		Eventually(func() []string { return EventReasons("orphan") }).Should(ContainElement(cairnv1.ReasonNotFoundInStorage))

		rs := &cairnv1.Restore{ObjectMeta: metav1.ObjectMeta{Name: "from-orphan", Namespace: OperatorNamespace},
			Spec: cairnv1.RestoreSpec{BackupName: "orphan"}}
		Expect(K8sClient.Create(SuiteCtx, rs)).To(Succeed())
		DeferCleanup(DeleteAllRestores)
		Eventually(func(g Gomega) {
			got := GetRestore(OperatorNamespace, "from-orphan")
			g.Expect(got.Status.Phase).To(Equal(cairnv1.RestorePhaseFailedValidation))
			g.Expect(strings.Join(got.Status.ValidationErrors, "\n")).To(ContainSubstring("backup orphan cannot be restored: The backup's data is not in storage location sync-dr any more"))
		}).Should(Succeed())

		commitElsewhere(store, OperatorNamespace, "orphan", uidA, cairnv1.BackupSpec{})
		Eventually(func() bool {
			return meta.IsStatusConditionTrue(GetBackup(OperatorNamespace, "orphan").Status.Conditions, cairnv1.BackupConditionDataAvailable)
		}).WithTimeout(10 * time.Second).Should(BeTrue())
	})

	It("deletes a backup whose data is gone without a storage call", func() {
		keys := commitElsewhere(store, OperatorNamespace, "orphan-deleted", uidA, cairnv1.BackupSpec{})
		EventuallySynced(OperatorNamespace, "orphan-deleted")
		Expect(store.Delete(SuiteCtx, keys.Metadata)).To(Succeed())
		Eventually(func() bool {
			return meta.IsStatusConditionFalse(GetBackup(OperatorNamespace, "orphan-deleted").Status.Conditions, cairnv1.BackupConditionDataAvailable)
		}).WithTimeout(10 * time.Second).Should(BeTrue())

		DeleteBackup("orphan-deleted")
		ExpectGone("orphan-deleted")
		// The deletion touched nothing: what was left of the data (the archive) is still there.
		Expect(store.Exists(SuiteCtx, keys.Archive)).To(BeTrue())
		Expect(recorder.Of("orphan-deleted")).NotTo(ContainElement(cairnv1.BackupPhaseDeleting))
	})

	It("deletes a synced backup's data with it (it is its origin's), and never makes it again", func() {
		keys := commitElsewhere(store, OperatorNamespace, "deleted", uidA, cairnv1.BackupSpec{})
		EventuallySynced(OperatorNamespace, "deleted")
		DeleteBackup("deleted")
		ExpectGone("deleted")
		Expect(store.List(SuiteCtx, keys.Dir)).To(BeEmpty())
		Consistently(func() *cairnv1.Backup { return FindBackup(OperatorNamespace, "deleted") }).
			WithTimeout(3 * time.Second).Should(BeNil())
	})

	It("makes a backup deleted with keep-data again at the next sync: its data is still there", func() {
		commitElsewhere(store, OperatorNamespace, "kept", uidA, cairnv1.BackupSpec{})
		first := EventuallySynced(OperatorNamespace, "kept")
		patch := client.MergeFrom(first.DeepCopy())
		first.Annotations[cairnv1.KeepDataAnnotation] = "true"
		Expect(K8sClient.Patch(SuiteCtx, first, patch)).To(Succeed())
		DeleteBackup("kept")

		Eventually(func(g Gomega) {
			b := FindBackup(OperatorNamespace, "kept")
			g.Expect(b).NotTo(BeNil())
			g.Expect(b.UID).NotTo(Equal(first.UID))
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
		}).WithTimeout(20 * time.Second).Should(Succeed())
	})

	It("skips the backups of a namespace that does not exist, with a Warning event naming it, and makes them once it does", func() {
		const absent = "sync-not-yet"
		commitElsewhere(store, absent, "team-backup", uidA, cairnv1.BackupSpec{})
		Eventually(func() string {
			var notes []string
			for _, e := range EventsFor(bsl) {
				if e.Reason == "SyncSkipped" && e.Type == "Warning" {
					notes = append(notes, e.Note)
				}
			}
			return strings.Join(notes, "\n")
		}).WithTimeout(10 * time.Second).Should(ContainSubstring("backups of namespaces that do not exist were skipped: " + absent))
		Expect(FindBackup(absent, "team-backup")).To(BeNil())

		EnsureNamespace(absent)
		EventuallySynced(absent, "team-backup")
	})

	It("refuses a stored marker that names another namespace, or breaks the tenancy rule, and goes on with the others", func() {
		EnsureNamespace("sync-team")
		// A marker under sync-team's directory that claims to be another namespace's backup.
		liar := commitElsewhere(store, "sync-elsewhere", "liar", uidA, cairnv1.BackupSpec{})
		data, err := store.Get(SuiteCtx, liar.Metadata)
		Expect(err).NotTo(HaveOccurred())
		Expect(store.Put(SuiteCtx, storage.Layout{}.Backup("sync-team", "liar").Metadata, data)).To(Succeed())
		data.Close()
		// A team's backup whose spec selects another namespace.
		commitElsewhere(store, "sync-team", "greedy", uidA, cairnv1.BackupSpec{IncludedNamespaces: []string{"kube-system"}})
		// Something that is not a marker at all.
		Expect(store.Put(SuiteCtx, storage.Layout{}.Backup("sync-team", "garbage").Metadata, strings.NewReader("not a marker"))).To(Succeed())
		written := metav1.NewTime(time.Now().Truncate(time.Second))
		commitElsewhere(store, "sync-team", "honest", uidA, cairnv1.BackupSpec{})

		EventuallySynced("sync-team", "honest")
		// The pass that made it went to its end (it wrote lastSyncedTime): the refused ones
		// did not stop it.
		Eventually(func(g Gomega) {
			var got cairnv1.BackupStorageLocation
			g.Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(bsl), &got)).To(Succeed())
			g.Expect(got.Status.LastSyncedTime).NotTo(BeNil())
			g.Expect(got.Status.LastSyncedTime.Time).To(BeTemporally(">=", written.Time))
		}).Should(Succeed())
		Consistently(func() []*cairnv1.Backup {
			return []*cairnv1.Backup{FindBackup("sync-team", "liar"), FindBackup("sync-team", "greedy"), FindBackup("sync-team", "garbage")}
		}).WithTimeout(3 * time.Second).Should(Equal([]*cairnv1.Backup{nil, nil, nil}))
		Eventually(func() string {
			var notes []string
			for _, e := range EventsFor(bsl) {
				if e.Reason == "SyncSkipped" {
					notes = append(notes, e.Note)
				}
			}
			return strings.Join(notes, "\n")
		}).Should(And(ContainSubstring("sync-team/garbage"), ContainSubstring("sync-team/greedy"), ContainSubstring("sync-team/liar")))
		Expect(FindBackup("sync-elsewhere", "liar")).To(BeNil(), "the namespace does not exist, and nothing is written elsewhere")
	})

	It("fails a Backup made by hand with the synced-from annotation when the location has no such committed backup", func() {
		b := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: OperatorNamespace,
			Annotations: map[string]string{cairnv1.SyncedFromAnnotation: "sync-dr"}}}
		Expect(K8sClient.Create(SuiteCtx, b)).To(Succeed())
		Eventually(func(g Gomega) {
			got := GetBackup(OperatorNamespace, "forged")
			g.Expect(got.Status.Phase).To(Equal(cairnv1.BackupPhaseFailedValidation))
			g.Expect(got.Status.ValidationErrors).To(ConsistOf(ContainSubstring("storage location sync-dr holds no committed backup named cairn-system/forged")))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		Eventually(func() []cairnv1.BackupPhase { return recorder.Of("forged") }).Should(Equal([]cairnv1.BackupPhase{"", cairnv1.BackupPhaseFailedValidation}), "the queue never took it")

		// A team's Backup made by hand over its own committed backup, with a spec the team
		// could never run: refused, not shown as a completed backup of other namespaces.
		team := "sync-forge-team"
		CreateObject(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}})
		commitElsewhere(store, team, "greedy", uidA, cairnv1.BackupSpec{})
		greedy := &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "greedy", Namespace: team,
			Annotations: map[string]string{cairnv1.SyncedFromAnnotation: "sync-dr"}},
			Spec: cairnv1.BackupSpec{IncludedNamespaces: []string{"kube-system"}}}
		Expect(K8sClient.Create(SuiteCtx, greedy)).To(Succeed())
		Eventually(func(g Gomega) {
			got := GetBackup(team, "greedy")
			g.Expect(got.Status.Phase).To(Equal(cairnv1.BackupPhaseFailedValidation))
			g.Expect(got.Status.ValidationErrors).To(ConsistOf(ContainSubstring("its spec is not one a backup in namespace " + team + " may have")))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})
})

var _ = Describe("Sync from storage, turned off and on", Ordered, func() {
	BeforeAll(func() {
		// The manager's default period is 1s; the location's own 0s wins.
		period := time.Second
		DeferCleanup(DeleteAllBackups)
		stop := StartManager(controller.Config{BackupSyncPeriod: &period})
		DeferCleanup(func() { stop() })
	})

	It("syncs nothing from a location with backupSyncPeriod 0s, until it is set", func() {
		store, bsl := SyncedLocation("sync-off", 0, cairnv1.AccessModeReadOnly, nil)
		EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
		commitElsewhere(store, OperatorNamespace, "not-synced", "uid-x", cairnv1.BackupSpec{})
		Consistently(func() *cairnv1.Backup { return FindBackup(OperatorNamespace, "not-synced") }).
			WithTimeout(3 * time.Second).Should(BeNil())

		patch := client.MergeFrom(bsl.DeepCopy())
		bsl.Spec.BackupSyncPeriod = &metav1.Duration{Duration: time.Second}
		Expect(K8sClient.Patch(SuiteCtx, bsl, patch)).To(Succeed())
		b := EventuallySynced(OperatorNamespace, "not-synced")
		Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
	})

	It("fails a new backup whose name another Backup object committed in its ReadWrite location, before it runs", func() {
		// A long period: the one pass is the one made when the location became Available.
		const ns = "sync-conflict-team"
		_, bsl := SyncedLocation("sync-conflict", time.Hour, cairnv1.AccessModeReadWrite, func(store storage.ObjectStore) {
			commitElsewhere(store, ns, "daily", "uid-of-another-cluster", cairnv1.BackupSpec{})
		})
		EventuallyLocation(bsl, cairnv1.StorageLocationPhaseAvailable, "")
		Eventually(func() *metav1.Time {
			var got cairnv1.BackupStorageLocation
			Expect(K8sClient.Get(SuiteCtx, client.ObjectKeyFromObject(bsl), &got)).To(Succeed())
			return got.Status.LastSyncedTime
		}).ShouldNot(BeNil())

		EnsureNamespace(ns)
		CreateBackup(ns, "daily", cairnv1.BackupSpec{StorageLocation: "sync-conflict", TTL: &metav1.Duration{Duration: time.Hour}})
		Eventually(func(g Gomega) {
			b := GetBackup(ns, "daily")
			g.Expect(b.Status.Phase).To(Equal(cairnv1.BackupPhaseFailedValidation))
			g.Expect(b.Status.ValidationErrors).To(ContainElement(ContainSubstring(
				"storage location sync-conflict already holds a committed backup named sync-conflict-team/daily, made by another Backup object")))
			g.Expect(b.Status.StartTimestamp).To(BeNil(), "it never ran")
		}).Should(Succeed())
	})
})

var _ = Describe("Sync from a storage service that stops answering", Ordered, func() {
	var (
		hung       *HangingStore
		hungLoc    *cairnv1.BackupStorageLocation
		fine       *storage.Filesystem
		hungBackup = "from-a-hung-bucket"
	)

	BeforeAll(func() {
		_, def := CreateDefaultLocation("sync-hung-default")
		EnsureNamespace("sync-hung-data")
		CreateObject(ConfigMap("sync-hung-data", "settings", nil))
		var hungFS *storage.Filesystem
		hungFS, hungLoc = SyncedLocation("sync-hung", time.Second, cairnv1.AccessModeReadOnly, nil)
		hung = &HangingStore{ObjectStore: hungFS}
		fine, _ = SyncedLocation("sync-fine", time.Second, cairnv1.AccessModeReadOnly, nil)
		DeferCleanup(DeleteAllBackups)
		// Every storage call of a pass gives up after 2 s; the hung one is retried with backoff.
		stop := StartManager(controller.Config{StorageTimeout: 2 * time.Second,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "sync-hung" {
					return hung
				}
				return s
			}})
		DeferCleanup(func() { stop() })
		DeferCleanup(hung.Answer)
		for _, loc := range []*cairnv1.BackupStorageLocation{def, hungLoc} {
			EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
		}
	})

	It("holds only its own pass: other locations sync and backups run while it hangs, and it syncs once storage answers", func() {
		commitElsewhere(hung.ObjectStore, OperatorNamespace, hungBackup, "uid-hung", cairnv1.BackupSpec{})
		hung.Hang(false)
		Eventually(hung.WaitingCalls).WithTimeout(10 * time.Second).Should(BeNumerically(">=", 1))

		commitElsewhere(fine, OperatorNamespace, "from-a-fine-bucket", "uid-fine", cairnv1.BackupSpec{})
		EventuallySynced(OperatorNamespace, "from-a-fine-bucket")
		CreateBackup(OperatorNamespace, "made-while-hung", cairnv1.BackupSpec{IncludedNamespaces: []string{"sync-hung-data"}})
		WaitPhase("made-while-hung", cairnv1.BackupPhaseCompleted)
		Expect(FindBackup(OperatorNamespace, hungBackup)).To(BeNil(), "the hung location's passes fail, and are retried")

		hung.Answer()
		Expect(EventuallySynced(OperatorNamespace, hungBackup).Status.Phase).To(Equal(cairnv1.BackupPhaseCompleted))
	})
})
