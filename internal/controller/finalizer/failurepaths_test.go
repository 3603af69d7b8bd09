package finalizer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
)

// trickyStore fails the Puts and Gets of keys that contain a given text, and can flip a byte of
// the archive as it is stored (a disk that corrupts what it is given).
type trickyStore struct {
	storage.ObjectStore
	mu             sync.Mutex
	failPuts       string
	failGets       string
	corruptArchive bool
}

var errInjected = errors.New("injected storage failure")

func (s *trickyStore) set(f func(*trickyStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *trickyStore) Put(ctx context.Context, key string, r io.Reader) error {
	s.mu.Lock()
	fail, corrupt := s.failPuts != "" && strings.Contains(key, s.failPuts), s.corruptArchive && strings.HasSuffix(key, ".tar.gz")
	s.mu.Unlock()
	if fail {
		_, _ = io.Copy(io.Discard, r)
		return errInjected
	}
	if corrupt {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		data[len(data)/2] ^= 0x01
		r = bytes.NewReader(data)
	}
	return s.ObjectStore.Put(ctx, key, r)
}

func (s *trickyStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	s.mu.Lock()
	fail := s.failGets != "" && strings.Contains(key, s.failGets)
	s.mu.Unlock()
	if fail {
		return nil, errInjected
	}
	return s.ObjectStore.Get(ctx, key)
}

var _ = Describe("Failure paths", Ordered, func() {
	var tricky *trickyStore

	BeforeAll(func() {
		fs, loc := CreateDefaultLocation("tricky-default")
		tricky = &trickyStore{ObjectStore: fs}
		EnsureNamespace("tricky-data")
		CreateObject(ConfigMap("tricky-data", "a", nil))
		stop := StartManager(controller.Config{ConcurrentBackups: 1, ItemBlockWorkerCount: 2, PhaseTimeout: 3 * time.Second,
			StorageTimeout: 2 * time.Second, RetryBackoffMin: 100 * time.Millisecond, RetryBackoffMax: 500 * time.Millisecond,
			WrapStore: func(bsl *cairnv1.BackupStorageLocation, s storage.ObjectStore) storage.ObjectStore {
				if bsl.Name == "tricky-default" {
					return tricky
				}
				return s
			}})
		DeferCleanup(func() { stop() })
		DeferCleanup(DeleteAllBackups)
		EventuallyLocation(loc, cairnv1.StorageLocationPhaseAvailable, "")
	})
	AfterEach(func() { tricky.set(func(s *trickyStore) { s.failPuts, s.failGets, s.corruptArchive = "", "", false }) })

	// onlyLog says the backup's directory holds nothing but its log.
	onlyLog := func(name string) {
		GinkgoHelper()
		keys := storage.Layout{}.Backup(OperatorNamespace, name)
		Expect(tricky.ObjectStore.List(SuiteCtx, keys.Dir)).To(Equal([]string{keys.Logs}))
		Expect(ReadLog(tricky.ObjectStore, keys)).To(ContainSubstring("Backup failed"))
	}

	It("fails a run whose archive upload fails, keeping only the log", func() {
		tricky.set(func(s *trickyStore) { s.failPuts = ".tar.gz" })
		CreateBackup(OperatorNamespace, "fail-upload", cairnv1.BackupSpec{IncludedNamespaces: []string{"tricky-data"}})
		b := WaitPhase("fail-upload", cairnv1.BackupPhaseFailed)
		Expect(b.Status.FailureReason).To(ContainSubstring("injected storage failure"))
		onlyLog("fail-upload")
	})

	It("fails a run whose side file upload fails, removing the archive it wrote", func() {
		tricky.set(func(s *trickyStore) { s.failPuts = "-resource-list.json.gz" })
		CreateBackup(OperatorNamespace, "fail-sidefile", cairnv1.BackupSpec{IncludedNamespaces: []string{"tricky-data"}})
		b := WaitPhase("fail-sidefile", cairnv1.BackupPhaseFailed)
		Expect(b.Status.FailureReason).To(And(ContainSubstring("uploading to storage location tricky-default"), ContainSubstring("injected storage failure")))
		onlyLog("fail-sidefile")
	})

	It("fails a backup whose stored archive is not the one uploaded, committing nothing", func() {
		tricky.set(func(s *trickyStore) { s.corruptArchive = true })
		CreateBackup(OperatorNamespace, "corrupted", cairnv1.BackupSpec{IncludedNamespaces: []string{"tricky-data"}})
		b := WaitPhase("corrupted", cairnv1.BackupPhaseFailed)
		Expect(b.Status.FailureReason).To(SatisfyAny(ContainSubstring("archive checksum mismatch"), ContainSubstring("cannot be read")))
		keys := storage.Layout{}.Backup(OperatorNamespace, "corrupted")
		Expect(tricky.ObjectStore.Exists(SuiteCtx, keys.Metadata)).To(BeFalse(), "no commit marker")
		Expect(tricky.ObjectStore.Exists(SuiteCtx, keys.Archive)).To(BeFalse(), "the bad archive is removed")
	})

	It("retries a finalize while storage fails, and commits once it answers", func() {
		tricky.set(func(s *trickyStore) { s.failGets = ".tar.gz" })
		CreateBackup(OperatorNamespace, "finalize-later", cairnv1.BackupSpec{IncludedNamespaces: []string{"tricky-data"}})
		WaitPhase("finalize-later", cairnv1.BackupPhaseFinalizing)
		Consistently(func() cairnv1.BackupPhase { return GetBackup(OperatorNamespace, "finalize-later").Status.Phase }).
			WithTimeout(time.Second).Should(Equal(cairnv1.BackupPhaseFinalizing))
		tricky.set(func(s *trickyStore) { s.failGets = "" })
		WaitPhase("finalize-later", cairnv1.BackupPhaseCompleted)
		Expect(tricky.ObjectStore.Exists(SuiteCtx, storage.Layout{}.Backup(OperatorNamespace, "finalize-later").Metadata)).To(BeTrue())
	})

	It("ends a finalize that cannot succeed within the phase timeout in Failed, with the last error", func() {
		tricky.set(func(s *trickyStore) { s.failGets = ".tar.gz" })
		CreateBackup(OperatorNamespace, "finalize-never", cairnv1.BackupSpec{IncludedNamespaces: []string{"tricky-data"}})
		b := WaitPhase("finalize-never", cairnv1.BackupPhaseFailed)
		Expect(b.Status.FailureReason).To(And(ContainSubstring("could not be finalized within 3s"), ContainSubstring("injected storage failure")))
		Expect(tricky.ObjectStore.Exists(SuiteCtx, storage.Layout{}.Backup(OperatorNamespace, "finalize-never").Metadata)).To(BeFalse())
	})
})
