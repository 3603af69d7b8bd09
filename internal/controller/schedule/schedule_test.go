package schedule_test

import (
	"slices"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
)

func getSchedule(namespace, name string) *cairnv1.Schedule {
	GinkgoHelper()
	var s cairnv1.Schedule
	Expect(K8sClient.Get(SuiteCtx, types.NamespacedName{Namespace: namespace, Name: name}, &s)).To(Succeed())
	return &s
}

// scheduleBackups lists the backups a schedule created (by its label), sorted by name.
func scheduleBackups(namespace, name string) []cairnv1.Backup {
	GinkgoHelper()
	var list cairnv1.BackupList
	Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(namespace), client.MatchingLabels{cairnv1.ScheduleNameLabel: name})).To(Succeed())
	slices.SortFunc(list.Items, func(a, b cairnv1.Backup) int { return cmpString(a.Name, b.Name) })
	return list.Items
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func backupNames(backups []cairnv1.Backup) []string {
	var names []string
	for _, b := range backups {
		names = append(names, b.Name)
	}
	return names
}

func scheduleEvents(namespace, name string) []eventsv1.Event {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(namespace))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Schedule" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// patchSchedule changes a schedule's spec (or only touches it, so that it is reconciled now:
// with a fake clock, nothing else wakes it at the fake time).
func patchSchedule(namespace, name string, mutate func(*cairnv1.Schedule)) {
	GinkgoHelper()
	Eventually(func() error {
		s := getSchedule(namespace, name)
		patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
		mutate(s)
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations["test/touched"] = time.Now().Format(time.RFC3339Nano)
		return K8sClient.Patch(SuiteCtx, s, patch)
	}).Should(Succeed())
}

var _ = Describe("Schedules", Ordered, func() {
	BeforeAll(func() {
		CreateDefaultLocation("schedules")
		// Other tests' managers must not find these schedules, nor their backups (envtest has
		// no garbage collector for owned ones).
		DeferCleanup(func() {
			for _, ns := range []string{"sched-real", "sched-fake"} {
				Expect(K8sClient.DeleteAllOf(SuiteCtx, &cairnv1.Schedule{}, client.InNamespace(ns))).To(Succeed())
			}
			DeleteAllBackups()
		})
	})

	Context("with the real clock and every reconciler", Ordered, func() {
		const ns = "sched-real"
		var stop func()

		BeforeAll(func() {
			EnsureNamespace(ns)
			CreateObject(ConfigMap(ns, "settings", nil))
			stop = StartManager(controller.Config{})
			DeferCleanup(func() { stop() })
		})

		It("creates named, labelled, owned backups at each tick, which complete", func() {
			s := &cairnv1.Schedule{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fast", Labels: map[string]string{"argocd.argoproj.io/instance": "team"}},
				Spec: cairnv1.ScheduleSpec{Schedule: "@every 2s", UseOwnerReferencesInBackup: true,
					Template: cairnv1.BackupSpec{Metadata: &cairnv1.BackupMetadata{Labels: map[string]string{"tier": "gold"}}}},
			}
			Expect(K8sClient.Create(SuiteCtx, s)).To(Succeed())

			// Nothing touches the schedule: only its own requeue at each tick makes the runs.
			var backups []cairnv1.Backup
			Eventually(func(g Gomega) {
				backups = scheduleBackups(ns, "fast")
				completed := 0
				for _, b := range backups {
					if b.Status.Phase == cairnv1.BackupPhaseCompleted {
						completed++
					}
				}
				g.Expect(completed).To(BeNumerically(">=", 2), "backups %v", backupNames(backups))
			}).WithTimeout(60 * time.Second).Should(Succeed())

			for _, b := range backups {
				Expect(b.Name).To(MatchRegexp(`^fast-\d{14}$`))
				ts, err := time.Parse("20060102150405", b.Name[len("fast-"):])
				Expect(err).NotTo(HaveOccurred())
				Expect(ts.Sub(s.CreationTimestamp.Time)).To(BeNumerically(">", 0), "a new schedule waits for its first tick")
				Expect(b.Labels).To(Equal(map[string]string{cairnv1.ScheduleNameLabel: "fast", "tier": "gold"}), "the template's labels, never the schedule's own")
				Expect(b.OwnerReferences).To(HaveLen(1))
				Expect(b.OwnerReferences[0].Kind).To(Equal("Schedule"))
				Expect(b.OwnerReferences[0].UID).To(Equal(s.UID))
				Expect(b.Spec.IncludedNamespaces).To(BeEmpty())
			}
			got := getSchedule(ns, "fast")
			Expect(got.Status.Phase).To(Equal(cairnv1.SchedulePhaseEnabled))
			Expect(got.Status.LastBackup).NotTo(BeNil())
			Expect(got.Status.NextBackup).NotTo(BeNil())

			By("pausing it: the runs stop")
			patchSchedule(ns, "fast", func(s *cairnv1.Schedule) { s.Spec.Paused = true })
			Eventually(func() cairnv1.SchedulePhase { return getSchedule(ns, "fast").Status.Phase }).Should(Equal(cairnv1.SchedulePhasePaused))
			Expect(getSchedule(ns, "fast").Status.NextBackup).To(BeNil())
			count := len(scheduleBackups(ns, "fast"))
			Consistently(func() int { return len(scheduleBackups(ns, "fast")) }).WithTimeout(5 * time.Second).Should(Equal(count))

			Expect(K8sClient.Delete(SuiteCtx, getSchedule(ns, "fast"))).To(Succeed())
		})
	})

	Context("with a fake clock", Ordered, func() {
		const ns = "sched-fake"
		var clk *clocktesting.FakeClock
		var created time.Time
		var stop func()

		BeforeAll(func() {
			EnsureNamespace(ns)
			clk = clocktesting.NewFakeClock(time.Now())
			// Only the schedule reconciler runs: the test plays the backups' owners.
			stop = StartManager(controller.Config{Clock: clk, Controllers: []string{"schedule"}})
			DeferCleanup(func() { stop() })
			s := &cairnv1.Schedule{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hourly"},
				Spec:       cairnv1.ScheduleSpec{Schedule: "0 * * * *"},
			}
			Expect(K8sClient.Create(SuiteCtx, s)).To(Succeed())
			created = s.CreationTimestamp.Time
		})

		// tick is the n-th hourly tick after the schedule's creation.
		tick := func(n int) time.Time { return created.Truncate(time.Hour).Add(time.Duration(n) * time.Hour) }
		name := func(t time.Time) string { return "hourly-" + t.UTC().Format("20060102150405") }
		// setBackupPhase plays the backup's owning reconciler.
		setBackupPhase := func(name string, phase cairnv1.BackupPhase) {
			GinkgoHelper()
			Eventually(func() error {
				b := GetBackup(ns, name)
				patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
				b.Status.Phase = phase
				return K8sClient.Status().Patch(SuiteCtx, b, patch)
			}).Should(Succeed())
		}

		It("waits for its first tick", func() {
			Eventually(func(g Gomega) {
				s := getSchedule(ns, "hourly")
				g.Expect(s.Status.Phase).To(Equal(cairnv1.SchedulePhaseEnabled))
				g.Expect(s.Status.NextBackup).NotTo(BeNil())
				g.Expect(s.Status.NextBackup.Time).To(BeTemporally("==", tick(1)))
			}).Should(Succeed())
			Expect(scheduleBackups(ns, "hourly")).To(BeEmpty())
		})

		It("creates the tick's backup when the tick comes", func() {
			clk.SetTime(tick(1).Add(time.Second))
			patchSchedule(ns, "hourly", func(*cairnv1.Schedule) {})
			Eventually(func() []string { return backupNames(scheduleBackups(ns, "hourly")) }).Should(Equal([]string{name(tick(1))}))
			Eventually(func(g Gomega) {
				s := getSchedule(ns, "hourly")
				g.Expect(s.Status.NextBackup.Time).To(BeTemporally("==", tick(2)))
				g.Expect(s.Status.LastBackup).NotTo(BeNil())
			}).Should(Succeed())
		})

		It("skips a run while the previous backup is Queued, with an event naming it", func() {
			setBackupPhase(name(tick(1)), cairnv1.BackupPhaseQueued)
			clk.SetTime(tick(2).Add(time.Second))
			patchSchedule(ns, "hourly", func(*cairnv1.Schedule) {})
			Eventually(func(g Gomega) {
				s := getSchedule(ns, "hourly")
				g.Expect(s.Status.LastSkipped).NotTo(BeNil())
				c := meta.FindStatusCondition(s.Status.Conditions, cairnv1.ScheduleConditionSkipped)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(c.Reason).To(Equal(cairnv1.ReasonBackupStillRunning))
				g.Expect(s.Status.NextBackup.Time).To(BeTemporally("==", tick(3)))
			}).Should(Succeed())
			Eventually(func(g Gomega) {
				var notes []string
				for _, e := range scheduleEvents(ns, "hourly") {
					if e.Reason == "Skipped" {
						notes = append(notes, e.Note)
					}
				}
				g.Expect(notes).To(ContainElement(ContainSubstring("backup " + name(tick(1)) + " has not ended")))
			}).Should(Succeed())
			Expect(backupNames(scheduleBackups(ns, "hourly"))).To(Equal([]string{name(tick(1))}))
		})

		It("skips a run while the previous backup is InProgress", func() {
			setBackupPhase(name(tick(1)), cairnv1.BackupPhaseInProgress)
			clk.SetTime(tick(3).Add(time.Second))
			patchSchedule(ns, "hourly", func(*cairnv1.Schedule) {})
			Eventually(func() time.Time { return getSchedule(ns, "hourly").Status.NextBackup.Time }).Should(BeTemporally("==", tick(4)))
			Expect(backupNames(scheduleBackups(ns, "hourly"))).To(Equal([]string{name(tick(1))}))
		})

		It("runs once the backup ended, with the edited template", func() {
			setBackupPhase(name(tick(1)), cairnv1.BackupPhaseCompleted)
			patchSchedule(ns, "hourly", func(s *cairnv1.Schedule) { s.Spec.Template.IncludedResources = []string{"configmaps"} })
			Expect(backupNames(scheduleBackups(ns, "hourly"))).To(HaveLen(1), "an edit is not a run")
			clk.SetTime(tick(4).Add(time.Second))
			patchSchedule(ns, "hourly", func(*cairnv1.Schedule) {})
			Eventually(func() []string { return backupNames(scheduleBackups(ns, "hourly")) }).Should(Equal([]string{name(tick(1)), name(tick(4))}))
			Expect(GetBackup(ns, name(tick(4))).Spec.IncludedResources).To(Equal([]string{"configmaps"}))
			Eventually(func() metav1.ConditionStatus {
				return meta.FindStatusCondition(getSchedule(ns, "hourly").Status.Conditions, cairnv1.ScheduleConditionSkipped).Status
			}).Should(Equal(metav1.ConditionFalse))
			setBackupPhase(name(tick(4)), cairnv1.BackupPhaseCompleted)
		})

		It("makes no runs while paused, and one at once when unpaused after missed ticks", func() {
			patchSchedule(ns, "hourly", func(s *cairnv1.Schedule) { s.Spec.Paused = true })
			Eventually(func() cairnv1.SchedulePhase { return getSchedule(ns, "hourly").Status.Phase }).Should(Equal(cairnv1.SchedulePhasePaused))
			clk.SetTime(tick(7).Add(time.Minute))
			patchSchedule(ns, "hourly", func(*cairnv1.Schedule) {})
			Consistently(func() int { return len(scheduleBackups(ns, "hourly")) }).WithTimeout(time.Second).Should(Equal(2))
			Expect(getSchedule(ns, "hourly").Status.NextBackup).To(BeNil())

			patchSchedule(ns, "hourly", func(s *cairnv1.Schedule) { s.Spec.Paused = false })
			Eventually(func() []string { return backupNames(scheduleBackups(ns, "hourly")) }).
				Should(Equal([]string{name(tick(1)), name(tick(4)), name(tick(7))}), "one backup for the missed ticks 5, 6 and 7, named for the last")
			Eventually(func() cairnv1.SchedulePhase { return getSchedule(ns, "hourly").Status.Phase }).Should(Equal(cairnv1.SchedulePhaseEnabled))
			setBackupPhase(name(tick(7)), cairnv1.BackupPhaseCompleted)
		})

		It("skips the missed run on unpausing with skipImmediately, once", func() {
			patchSchedule(ns, "hourly", func(s *cairnv1.Schedule) { s.Spec.Paused, s.Spec.SkipImmediately = true, true })
			Eventually(func() cairnv1.SchedulePhase { return getSchedule(ns, "hourly").Status.Phase }).Should(Equal(cairnv1.SchedulePhasePaused))
			clk.SetTime(tick(9).Add(time.Minute))
			patchSchedule(ns, "hourly", func(s *cairnv1.Schedule) { s.Spec.Paused = false })
			Eventually(func(g Gomega) {
				s := getSchedule(ns, "hourly")
				g.Expect(s.Spec.SkipImmediately).To(BeFalse(), "skipImmediately applies once")
				g.Expect(s.Status.Phase).To(Equal(cairnv1.SchedulePhaseEnabled))
				g.Expect(s.Status.NextBackup.Time).To(BeTemporally("==", tick(10)))
			}).Should(Succeed())
			Expect(scheduleBackups(ns, "hourly")).To(HaveLen(3))

			clk.SetTime(tick(10).Add(time.Second))
			patchSchedule(ns, "hourly", func(*cairnv1.Schedule) {})
			Eventually(func() []string { return backupNames(scheduleBackups(ns, "hourly")) }).Should(ContainElement(name(tick(10))))
		})

		It("fails validation for a tenant's template selecting another namespace, and makes no runs", func() {
			s := &cairnv1.Schedule{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "greedy"},
				Spec: cairnv1.ScheduleSpec{Schedule: "CRON_TZ=America/New_York 0 3 * * *",
					Template: cairnv1.BackupSpec{IncludedNamespaces: []string{"kube-system"}}},
			}
			Expect(K8sClient.Create(SuiteCtx, s)).To(Succeed())
			Eventually(func(g Gomega) {
				got := getSchedule(ns, "greedy")
				g.Expect(got.Status.Phase).To(Equal(cairnv1.SchedulePhaseFailedValidation))
				g.Expect(got.Status.ValidationErrors).To(ContainElement(ContainSubstring(`may only back up its own namespace, not "kube-system"`)))
				g.Expect(got.Status.NextBackup).To(BeNil())
			}).Should(Succeed())
			clk.SetTime(clk.Now().Add(48 * time.Hour))
			patchSchedule(ns, "greedy", func(*cairnv1.Schedule) {})
			Consistently(func() []cairnv1.Backup { return scheduleBackups(ns, "greedy") }).WithTimeout(time.Second).Should(BeEmpty())

			By("fixing it")
			patchSchedule(ns, "greedy", func(s *cairnv1.Schedule) { s.Spec.Template.IncludedNamespaces = nil })
			Eventually(func() cairnv1.SchedulePhase { return getSchedule(ns, "greedy").Status.Phase }).Should(Equal(cairnv1.SchedulePhaseEnabled))
			Expect(getSchedule(ns, "greedy").Status.ValidationErrors).To(BeEmpty())
		})
	})
})
