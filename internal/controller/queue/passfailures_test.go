package queue_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	"github.com/go-logr/logr/funcr"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller/queue"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// openGate lets a queue made by a test run at once.
type openGate struct{}

func (openGate) Wait(context.Context) error { return nil }

// queueBackup is a backup as a fake-client test starts it: created at t0+age seconds, with a
// UID, in the operator's namespace.
func queueBackup(name string, age int, phase cairnv1.BackupPhase, position int32, spec cairnv1.BackupSpec) *cairnv1.Backup {
	return &cairnv1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: OperatorNamespace, UID: types.UID("uid-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, age, 0, time.UTC)),
			Finalizers:        []string{cairnv1.BackupDataFinalizer}},
		Spec:   spec,
		Status: cairnv1.BackupStatus{Phase: phase, QueuePosition: position, StorageLocation: "default"},
	}
}

// TestQueuePassGoesOnAfterAFailedWrite: the API server rejects the status writes of the backup
// "bad" at one step of a pass; the other backups still move in that same pass, the failure is
// logged, the pass ends with an error (so it is retried), and the retry moves "bad" too.
func TestQueuePassGoesOnAfterAFailedWrite(t *testing.T) {
	selecting := func(namespaces ...string) cairnv1.BackupSpec {
		return cairnv1.BackupSpec{IncludedNamespaces: namespaces}
	}
	tooBig := apierrors.NewRequestEntityTooLargeError("limit is 3145728")
	conflict := apierrors.NewConflict(cairnv1.GroupVersion.WithResource("backups").GroupResource(), "bad", fmt.Errorf("the object has been modified"))
	tests := []struct {
		name        string
		concurrency int
		backups     []*cairnv1.Backup
		fault       error
		// want are phases and positions ("Queued:2") after the failing pass; wantRetried after
		// the next, fault-free pass.
		want, wantRetried map[string]string
	}{
		{
			name:        "New → Queued of one new backup fails",
			concurrency: 2,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, "", 0, selecting("a")),
				queueBackup("good", 2, "", 0, selecting("b")),
			},
			fault:       conflict,
			want:        map[string]string{"bad": "", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "ReadyToStart", "good": "ReadyToStart"},
		},
		{
			// The slot the failed one would have taken goes to the next in line at once.
			name:        "New → Queued of the first new backup fails, with one slot",
			concurrency: 1,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, "", 0, selecting("a")),
				queueBackup("good", 2, "", 0, selecting("b")),
			},
			fault:       tooBig,
			want:        map[string]string{"bad": "", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "Queued:1", "good": "ReadyToStart"},
		},
		{
			name:        "the dequeue of the first queued backup fails",
			concurrency: 2,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, cairnv1.BackupPhaseQueued, 1, selecting("a")),
				queueBackup("good", 2, cairnv1.BackupPhaseQueued, 2, selecting("b")),
			},
			fault:       tooBig,
			want:        map[string]string{"bad": "Queued:1", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "ReadyToStart", "good": "ReadyToStart"},
		},
		{
			name:        "failing a cancelled backup fails",
			concurrency: 1,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, cairnv1.BackupPhaseQueued, 1, cairnv1.BackupSpec{IncludedNamespaces: []string{"a"}, Cancel: true}),
				queueBackup("good", 2, "", 0, selecting("a")),
			},
			fault:       conflict,
			want:        map[string]string{"bad": "Queued:1", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "Failed", "good": "ReadyToStart"},
		},
		{
			name:        "the FailedValidation write of an invalid backup fails",
			concurrency: 1,
			backups: []*cairnv1.Backup{
				queueBackup("bad", 1, "", 0, cairnv1.BackupSpec{StorageLocation: "nowhere"}),
				queueBackup("good", 2, "", 0, selecting("a")),
			},
			fault:       tooBig,
			want:        map[string]string{"bad": "", "good": "ReadyToStart"},
			wantRetried: map[string]string{"bad": "FailedValidation", "good": "ReadyToStart"},
		},
		{
			// The backup behind the failed one keeps its place rather than jump over it.
			name:        "renumbering one backup fails",
			concurrency: 1,
			backups: []*cairnv1.Backup{
				queueBackup("running", 0, cairnv1.BackupPhaseReadyToStart, 0, selecting("a")),
				queueBackup("good", 1, cairnv1.BackupPhaseQueued, 2, selecting("a")),
				queueBackup("bad", 2, cairnv1.BackupPhaseQueued, 3, selecting("a")),
				queueBackup("behind", 3, cairnv1.BackupPhaseQueued, 5, selecting("a")),
			},
			fault:       conflict,
			want:        map[string]string{"running": "ReadyToStart", "good": "Queued:1", "bad": "Queued:3", "behind": "Queued:5"},
			wantRetried: map[string]string{"running": "ReadyToStart", "good": "Queued:1", "bad": "Queued:2", "behind": "Queued:3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects := []client.Object{
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
				&cairnv1.BackupStorageLocation{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: OperatorNamespace},
					Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Default: true}},
			}
			for _, b := range tt.backups {
				objects = append(objects, b)
			}
			var faulty atomic.Bool
			faulty.Store(true)
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objects...).
				WithStatusSubresource(&cairnv1.Backup{}).
				WithInterceptorFuncs(interceptor.Funcs{
					SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
						if faulty.Load() && obj.GetName() == "bad" {
							return tt.fault
						}
						return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
					},
				}).Build()
			r := &queue.Reconciler{Client: c, Namespace: OperatorNamespace, ConcurrentBackups: tt.concurrency,
				ResyncPeriod: time.Minute, Clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)),
				Recorder: events.NewFakeRecorder(100), Gate: openGate{}}
			var logged []string
			ctx := ctrl.LoggerInto(context.Background(), funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))

			_, err := r.Reconcile(ctx, ctrl.Request{})
			if err == nil {
				t.Errorf("the pass with a failed write returned no error: it would not be retried")
			}
			if got := queueStates(t, c, tt.want); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("after the failing pass: %v, want %v", got, tt.want)
			}
			if !slices.ContainsFunc(logged, func(l string) bool { return strings.Contains(l, "cairn-system/bad") }) {
				t.Errorf("the failed write was not logged with the backup's name: %q", logged)
			}

			faulty.Store(false)
			if _, err := r.Reconcile(ctx, ctrl.Request{}); err != nil {
				t.Fatalf("the retry failed: %v", err)
			}
			if got := queueStates(t, c, tt.wantRetried); !reflect.DeepEqual(got, tt.wantRetried) {
				t.Errorf("after the retry: %v, want %v", got, tt.wantRetried)
			}
		})
	}
}

// queueStates reads the named backups' phases and positions ("Queued:2") from c.
func queueStates(t *testing.T, c client.Client, names map[string]string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for name := range names {
		var b cairnv1.Backup
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: OperatorNamespace, Name: name}, &b); err != nil {
			t.Fatal(err)
		}
		s := string(b.Status.Phase)
		if b.Status.Phase == cairnv1.BackupPhaseQueued {
			s = fmt.Sprintf("Queued:%d", b.Status.QueuePosition)
		}
		got[name] = s
	}
	return got
}
