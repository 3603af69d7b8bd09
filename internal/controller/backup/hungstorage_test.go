package backup_test

import (
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
)

var _ = Describe("A storage service that stops answering", Ordered, func() {
	var hung *HangingStore

	BeforeAll(func() {
		fs, loc := CreateDefaultLocation("hung-default")
		hung = &HangingStore{ObjectStore: fs}
		EnsureNamespace("hung-data")
		for _, name := range []string{"a", "b", "c"} {
			CreateObject(ConfigMap("hung-data", name, nil))
		}
		// A storage timeout far longer than the test: anything that waited on the hung
		// storage before writing the cancel would hold the backup InProgress for an hour.
		stop := StartManager(controller.Config{ConcurrentBackups: 1, ItemBlockWorkerCount: 2, StorageTimeout: time.Hour,
			RetryBackoffMin: 100 * time.Millisecond, RetryBackoffMax: 500 * time.Millisecond,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "hung-default" {
					return hung
				}
				return s
			}})
		DeferCleanup(func() { stop() })
		DeferCleanup(DeleteAllBackups)
		DeferCleanup(hung.Answer)
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
	})

	It("cannot hold a cancel: the backup reaches FinalizingCancelled while every storage call hangs, and is cleaned up once storage answers", func() {
		hung.Hang(true) // the archive upload hangs, so the backup stays InProgress
		CreateBackup(OperatorNamespace, "hung-cancel", cairnv1.BackupSpec{IncludedNamespaces: []string{"hung-data"}})
		WaitPhase("hung-cancel", cairnv1.BackupPhaseInProgress)
		Eventually(hung.WaitingCalls).Should(BeNumerically(">=", 1))
		hung.Hang(false) // now reads hang too: the whole service is gone

		CancelBackup("hung-cancel")
		WaitPhase("hung-cancel", cairnv1.BackupPhaseFinalizingCancelled)
		// The cleanup waits for storage; it never claims to be done meanwhile.
		Consistently(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "hung-cancel").Status.Phase }).
			WithTimeout(time.Second).Should(Equal(cairnv1.BackupPhaseFinalizingCancelled))

		hung.Answer()
		ExpectCancelled(hung.ObjectStore, "hung-cancel")
		// The run's own log lines survived the finalizer's append, and the other way round.
		log := ReadLog(hung.ObjectStore, storage.Layout{}.Backup(OperatorNamespace, "hung-cancel"))
		Expect(log).To(ContainSubstring("Backup cancelled while running"))
		Expect(strings.Count(log, cairnv1.FailureReasonCancelled)).To(BeNumerically(">=", 1))
	})
})
