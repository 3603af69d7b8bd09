package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// teamNamespace is the team's namespace of the tenant benchmark.
const teamNamespace = "bench-team"

// tenantRounds is how many times the tenant benchmark times each backup and each restore: on
// the shared machine one restore of 10,000 ConfigMaps takes from 11 to 18 s from one run to
// the next, and a backup of them under a second, of which the noise is a large part.
const tenantRounds = 5

// BenchmarkTenant10kConfigMaps backs up and restores 10,000 ConfigMaps of 1 KiB in one team
// namespace with the real manager binary, as the operator (a Backup and a Restore in the
// operator's namespace: the operator's own rights) and as a tenant (a ServiceAccount of the
// team, authenticated by a bound token, creating them in its namespace: the backup asks
// SubjectAccessReviews for it, the restore writes every item impersonating it; DESIGN.md
// section 15). Each backup and each restore is made tenantRounds times, the operator's first
// in one round and the tenant's first in the next, so that a busier moment of the machine falls on both. It reports the median time of
// each, and each ratio as the median of the rounds' ratios (pairedRatio); every run is logged.
func BenchmarkTenant10kConfigMaps(b *testing.B) {
	const n = 10000
	cl := startBackupCluster(b, 1)
	defer cl.stop()
	installAdmissionPolicies(b, cl)
	namespaces := []string{teamNamespace}
	fillConfigMaps(b, cl.c, namespaces, n)
	tenant := newBenchTenant(b, cl, teamNamespace)

	operatorBackup := func(round int) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: fmt.Sprintf("operator-%d", round)},
			Spec: cairnv1.BackupSpec{IncludedNamespaces: namespaces, IncludedResources: []string{"configmaps"}}}
	}
	tenantBackup := func(round int) *cairnv1.Backup {
		return &cairnv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: teamNamespace, Name: fmt.Sprintf("tenant-%d", round)},
			Spec: cairnv1.BackupSpec{IncludedResources: []string{"configmaps"}}}
	}
	opBackups, tenantBackups := &tenantRuns{name: "operator backups"}, &tenantRuns{name: "tenant backups"}
	for round := range tenantRounds {
		inTurn(round,
			func() { opBackups.add(timeBackupAs(b, cl.c, cl.c, operatorBackup(round), n)) },
			func() { tenantBackups.add(timeBackupAs(b, tenant, cl.c, tenantBackup(round), n)) })
	}

	restore := func(c client.Client, namespace, name, backupName string) (time.Duration, string) {
		deleteConfigMaps(b, cl.c, namespaces)
		run := timeRestore(b, cl.cfg, c, &cairnv1.Restore{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       cairnv1.RestoreSpec{BackupName: backupName, IncludedResources: []string{"configmaps"}},
		})
		rs := run.restore
		if p := rs.Status.Progress; p == nil || p.ItemsRestored != n || p.TotalItems != n || rs.Status.Errors != 0 {
			b.Fatalf("restore %s/%s: progress %+v, %d errors, want %d/%d and none", rs.Namespace, rs.Name, p, rs.Status.Errors, n, n)
		}
		if got := countConfigMaps(b, cl.c, namespaces, client.MatchingLabels{cairnv1.RestoreNameLabel: rs.Name}); got != n {
			b.Fatalf("%d ConfigMaps carry the label of restore %s/%s, want %d", got, rs.Namespace, rs.Name, n)
		}
		return run.entered[cairnv1.RestorePhaseCompleted], fmt.Sprintf("to InProgress %.0f ms, InProgress %.2f s, Finalizing %.0f ms",
			run.since("", cairnv1.RestorePhaseInProgress)*1000, run.since(cairnv1.RestorePhaseInProgress, cairnv1.RestorePhaseFinalizing),
			run.since(cairnv1.RestorePhaseFinalizing, cairnv1.RestorePhaseCompleted)*1000)
	}
	opRestores, tenantRestores := &tenantRuns{name: "operator restores"}, &tenantRuns{name: "tenant restores"}
	for round := range tenantRounds {
		inTurn(round,
			func() {
				opRestores.add(restore(cl.c, operatorNamespace, fmt.Sprintf("operator-%d", round), operatorBackup(round).Name))
			},
			func() {
				tenantRestores.add(restore(tenant, teamNamespace, fmt.Sprintf("tenant-%d", round), tenantBackup(round).Name))
			})
	}

	for _, runs := range []*tenantRuns{opBackups, tenantBackups, opRestores, tenantRestores} {
		b.Log(runs)
	}
	b.ReportMetric(opBackups.median().Seconds(), "operator-backup-s")
	b.ReportMetric(tenantBackups.median().Seconds(), "tenant-backup-s")
	b.ReportMetric(pairedRatio(tenantBackups, opBackups), "backup-ratio")
	b.ReportMetric(opRestores.median().Seconds(), "operator-restore-s")
	b.ReportMetric(tenantRestores.median().Seconds(), "tenant-restore-s")
	b.ReportMetric(pairedRatio(tenantRestores, opRestores), "restore-ratio")
}

// pairedRatio is the median over the rounds of tenant / operator, each round's two runs made
// one right after the other: a change in the machine's load between rounds (other work on it)
// then moves both sides of a ratio, where it would move only one of two medians.
func pairedRatio(tenant, operator *tenantRuns) float64 {
	ratios := make([]float64, len(tenant.walls))
	for i := range tenant.walls {
		ratios[i] = tenant.walls[i].Seconds() / operator.walls[i].Seconds()
	}
	slices.Sort(ratios)
	mid := len(ratios) / 2
	if len(ratios)%2 == 0 {
		return (ratios[mid-1] + ratios[mid]) / 2
	}
	return ratios[mid]
}

// tenantRuns are the runs of one of the tenant benchmark's measurements: each one's time, and
// where it went.
type tenantRuns struct {
	name   string
	walls  []time.Duration
	phases []string
}

func (r *tenantRuns) add(wall time.Duration, phases string) {
	r.walls = append(r.walls, wall)
	r.phases = append(r.phases, phases)
}

// median is the middle run's time (the mean of the two middle ones for an even count).
func (r *tenantRuns) median() time.Duration {
	sorted := slices.Sorted(slices.Values(r.walls))
	mid := len(sorted) / 2
	if len(sorted)%2 == 0 {
		return (sorted[mid-1] + sorted[mid]) / 2
	}
	return sorted[mid]
}

// String is one line for the benchmark's log: the median, then every run in the order made.
func (r *tenantRuns) String() string {
	var runs []string
	for i, wall := range r.walls {
		runs = append(runs, fmt.Sprintf("%.2f s (%s)", wall.Seconds(), r.phases[i]))
	}
	return fmt.Sprintf("%s: median %.2f s; runs: %s", r.name, r.median().Seconds(), strings.Join(runs, "; "))
}

// inTurn runs operator then tenant in even rounds, tenant then operator in odd ones.
func inTurn(round int, operator, tenant func()) {
	if round%2 == 0 {
		operator()
		tenant()
		return
	}
	tenant()
	operator()
}

// installAdmissionPolicies installs Cairn's admission policies on cl, with the manager's user as
// the operator.
func installAdmissionPolicies(b *testing.B, cl *backupCluster) {
	b.Helper()
	err := testenv.InstallAdmissionPolicies(context.Background(), cl.cfg, managerConfig(b, cl))
	if err != nil {
		b.Fatal(err)
	}
}

// managerConfig is the config the manager binary runs with: the kubeconfig its --kubeconfig
// flag names (the "bench" administrator of startBackupCluster), so that the admission policies
// name the manager's own user as the operator.
func managerConfig(b *testing.B, cl *backupCluster) *rest.Config {
	b.Helper()
	args := cl.manager.cmd.Args
	i := slices.Index(args, "--kubeconfig")
	if i < 0 || i+1 >= len(args) {
		b.Fatalf("the manager was started without --kubeconfig: %v", args)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", args[i+1])
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// newBenchTenant makes a ServiceAccount "tenant" in namespace, bound to a Role that may read
// and write ConfigMaps and create and read Backups and Restores there, and returns a client
// that authenticates with nothing but a bound token for it (kubectl create token).
func newBenchTenant(b *testing.B, cl *backupCluster, namespace string) client.Client {
	b.Helper()
	ctx := context.Background()
	mustCreate(b, cl.c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: namespace}})
	mustCreate(b, cl.c, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: namespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"},
				Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{cairnv1.GroupVersion.Group}, Resources: []string{"backups", "restores"},
				Verbs: []string{"create", "get", "list", "watch", "patch", "delete"}},
		},
	})
	mustCreate(b, cl.c, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "tenant", Namespace: namespace}},
	})
	cs, err := kubernetes.NewForConfig(cl.cfg)
	if err != nil {
		b.Fatal(err)
	}
	token, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "tenant", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := &rest.Config{Host: cl.cfg.Host, TLSClientConfig: rest.TLSClientConfig{CAData: cl.cfg.CAData}, BearerToken: token.Status.Token}
	if user, err := testenv.Username(ctx, cfg); err != nil || user != "system:serviceaccount:"+namespace+":tenant" {
		b.Fatalf("the tenant's token authenticates as %q (%v)", user, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// timeBackupAs creates bk with c (the tenant's client or the operator's) and returns the time
// from its creation to Completed, read through reader, and when it was first seen InProgress
// and Finalizing (0 ms: not seen); any other end, or a backup of other than n items, or with
// warnings or errors, fails the benchmark.
func timeBackupAs(b *testing.B, c, reader client.Client, bk *cairnv1.Backup, n int64) (wall time.Duration, phases string) {
	b.Helper()
	start := time.Now()
	mustCreate(b, c, bk)
	var toInProgress, toFinalizing time.Duration
	for deadline := start.Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var cur cairnv1.Backup
		if err := reader.Get(context.Background(), client.ObjectKeyFromObject(bk), &cur); err != nil {
			b.Fatal(err)
		}
		switch st := cur.Status; st.Phase {
		case cairnv1.BackupPhaseInProgress:
			if toInProgress == 0 {
				toInProgress = time.Since(start)
			}
		case cairnv1.BackupPhaseFinalizing:
			if toFinalizing == 0 {
				toFinalizing = time.Since(start)
			}
		case cairnv1.BackupPhaseCompleted:
			wall = time.Since(start)
			if p := st.Progress; p == nil || p.ItemsBackedUp != n || p.TotalItems != n || st.Warnings != 0 || st.Errors != 0 {
				b.Fatalf("backup %s/%s: progress %+v, %d warnings, %d errors; want %d/%d and none", bk.Namespace, bk.Name, p, st.Warnings, st.Errors, n, n)
			}
			return wall, fmt.Sprintf("to InProgress %d ms, to Finalizing %d ms", toInProgress.Milliseconds(), toFinalizing.Milliseconds())
		case cairnv1.BackupPhaseFailed, cairnv1.BackupPhaseFailedValidation, cairnv1.BackupPhasePartiallyFailed:
			b.Fatalf("backup %s/%s ended %s: %s %v", bk.Namespace, bk.Name, st.Phase, st.FailureReason, st.ValidationErrors)
		}
	}
	b.Fatalf("backup %s/%s did not complete in 10 minutes", bk.Namespace, bk.Name)
	return 0, ""
}
