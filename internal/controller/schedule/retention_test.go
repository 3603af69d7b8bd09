package schedule_test

import (
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
)

// Five simulated weeks of a daily schedule with retention: the schedule reconciler deletes what
// no rule keeps, and the deletion reconciler removes it (data first, then the object), holding
// the one a restore still reads. The test plays the queue and the backup reconciler.
var _ = Describe("Schedule retention", Ordered, func() {
	const ns = "sched-retention"
	var clk *clocktesting.FakeClock
	var monday time.Time // day 0, 00:00 UTC: a Monday in January, in the future
	var stop func()

	// day is the name of the backup of day d's run (03:00 in Paris, 02:00Z in winter).
	day := func(d int) string {
		return "daily-" + monday.Add(time.Duration(d)*24*time.Hour+2*time.Hour).Format("20060102150405")
	}
	days := func(ds ...int) []string {
		var names []string
		for _, d := range ds {
			names = append(names, day(d))
		}
		return names
	}
	// end plays the queue and the backup reconciler for day d's backup: the data finalizer,
	// a start a minute after the tick, and phase.
	end := func(d int, phase cairnv1.BackupPhase) {
		GinkgoHelper()
		Eventually(func() error {
			b := GetBackup(ns, day(d))
			patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
			controllerutil.AddFinalizer(b, cairnv1.BackupDataFinalizer)
			return K8sClient.Patch(SuiteCtx, b, patch)
		}).Should(Succeed())
		Eventually(func() error {
			b := GetBackup(ns, day(d))
			patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
			start := metav1.NewTime(monday.Add(time.Duration(d)*24*time.Hour + 2*time.Hour + time.Minute))
			b.Status.Phase, b.Status.StartTimestamp, b.Status.CompletionTimestamp = phase, &start, &start
			return K8sClient.Status().Patch(SuiteCtx, b, patch)
		}).Should(Succeed())
	}
	// existing is the schedule's backups, and those of them being deleted.
	existing := func() (all, deleting []string) {
		for _, b := range scheduleBackups(ns, "daily") {
			all = append(all, b.Name)
			if b.DeletionTimestamp != nil {
				deleting = append(deleting, b.Name)
			}
		}
		return all, deleting
	}

	BeforeAll(func() {
		EnsureNamespace(ns)
		monday = time.Now().UTC().Truncate(24 * time.Hour).Add(7 * 24 * time.Hour)
		for monday.Month() != time.January || monday.Weekday() != time.Monday {
			monday = monday.Add(24 * time.Hour)
		}
		clk = clocktesting.NewFakeClock(monday)
		stop = StartManager(controller.Config{Clock: clk, Controllers: []string{"schedule", "deletion"}})
		DeferCleanup(func() {
			stop()
			Expect(K8sClient.DeleteAllOf(SuiteCtx, &cairnv1.Schedule{}, client.InNamespace(ns))).To(Succeed())
			DeleteAllRestores()
			DeleteAllBackups()
		})
		_, _ = CreateDefaultLocation("retention")
		Expect(K8sClient.Create(SuiteCtx, &cairnv1.Schedule{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "daily"},
			Spec: cairnv1.ScheduleSpec{Schedule: "CRON_TZ=Europe/Paris 0 3 * * *", SkipImmediately: true,
				Retention: &cairnv1.RetentionPolicy{KeepLast: 2, Daily: 5, Weekly: 3}},
		})).To(Succeed())
		Eventually(func() cairnv1.SchedulePhase { return getSchedule(ns, "daily").Status.Phase }).Should(Equal(cairnv1.SchedulePhaseEnabled))
	})

	It("keeps what the policy says over five weeks, and holds a backup a restore reads", func() {
		for d := range 35 {
			clk.SetTime(monday.Add(time.Duration(d)*24*time.Hour + 2*time.Hour + time.Second))
			patchSchedule(ns, "daily", func(*cairnv1.Schedule) {})
			Eventually(func() []string { all, _ := existing(); return all }).Should(ContainElement(day(d)))
			if d == 0 {
				Expect(GetBackup(ns, day(0)).Spec.TTL).To(Equal(&metav1.Duration{}), "a schedule with retention makes backups that never expire")
				CreateRestore(ns, "reads-day-0", cairnv1.RestoreSpec{BackupName: day(0)})
			}
			phase := cairnv1.BackupPhaseCompleted
			if d == 30 {
				phase = cairnv1.BackupPhaseFailed
			}
			end(d, phase)
			if d == 30 {
				By("keeping a Failed backup until the next success")
				Consistently(func() []string { all, _ := existing(); return all }).WithTimeout(time.Second).Should(ContainElement(day(30)))
			}
		}
		// Days 0..34 from a Monday, day 30 Failed: keepLast 2 keeps 34 and 33; daily 5 the
		// last five days with a restorable backup, 34..31 and 29 (30 failed); weekly 3 the
		// Sundays 27 and 20 and day 34 (the fifth week's newest). Day 0 is held for the restore.
		want := days(0, 20, 27, 29, 31, 32, 33, 34)
		Eventually(func(g Gomega) {
			all, deleting := existing()
			g.Expect(all).To(ConsistOf(want))
			g.Expect(deleting).To(Equal(days(0)))
		}).WithTimeout(20 * time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			st := getSchedule(ns, "daily").Status.Retention
			g.Expect(st).NotTo(BeNil())
			g.Expect(st.Kept).To(Equal(cairnv1.RetentionCounts{KeepLast: 2, Daily: 5, Weekly: 3, NewestCompleted: 1}))
			g.Expect(st.Total).To(Equal(int32(7)))
		}).Should(Succeed())

		By("letting the restore end: the held backup goes")
		Eventually(func() error {
			rs := GetRestore(ns, "reads-day-0")
			patch := client.MergeFrom(rs.DeepCopy())
			rs.Status.Phase = cairnv1.RestorePhaseCompleted
			return K8sClient.Status().Patch(SuiteCtx, rs, patch)
		}).Should(Succeed())
		Eventually(func() []string { all, _ := existing(); return all }).WithTimeout(20 * time.Second).Should(ConsistOf(days(20, 27, 29, 31, 32, 33, 34)))
	})

	It("applies a changed retention at once", func() {
		patchSchedule(ns, "daily", func(s *cairnv1.Schedule) { s.Spec.Retention = &cairnv1.RetentionPolicy{Weekly: 2} })
		Eventually(func() []string { all, _ := existing(); return all }).WithTimeout(20 * time.Second).Should(ConsistOf(days(27, 34)))
		Eventually(func(g Gomega) {
			st := getSchedule(ns, "daily").Status.Retention
			g.Expect(st).NotTo(BeNil())
			g.Expect(st.Kept).To(Equal(cairnv1.RetentionCounts{Weekly: 2, NewestCompleted: 1}))
			g.Expect(st.Total).To(Equal(int32(2)))
		}).Should(Succeed())
	})
})
