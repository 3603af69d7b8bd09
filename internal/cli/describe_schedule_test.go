package cli

import (
	"regexp"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// schedule describe says whom the schedule acts as and since when (DESIGN.md section 21): the
// requester its annotations record, with the time the operator saw them first, only when
// status.actingAs is about that requester.
func TestDescribeScheduleActsAs(t *testing.T) {
	junior := "system:serviceaccount:team-a:junior"
	since := metav1.NewTime(now.Add(-2 * time.Hour))
	annotations := map[string]string{cairnv1.RequesterAnnotation: junior, cairnv1.RequesterUIDAnnotation: "u2"}
	tests := []struct {
		name        string
		namespace   string
		annotations map[string]string
		actingAs    *cairnv1.ScheduleRequester
		want        string
	}{
		{name: "seen by the operator", namespace: "team-a", annotations: annotations,
			actingAs: &cairnv1.ScheduleRequester{Username: junior, UID: "u2", Since: since},
			want:     `(?m)^Acts as:\s+system:serviceaccount:team-a:junior, since ` + regexp.QuoteMeta(since.UTC().Format(time.RFC3339)) + ` \(120m ago\)$`},
		{name: "redefined since the operator last looked", namespace: "team-a", annotations: annotations,
			actingAs: &cairnv1.ScheduleRequester{Username: "system:serviceaccount:team-a:lead", UID: "u1", Since: since},
			want:     `(?m)^Acts as:\s+system:serviceaccount:team-a:junior, since not yet seen by the operator$`},
		{name: "no requester recorded", namespace: "team-a",
			want: `(?m)^Acts as:\s+<no requester recorded: its backups fail validation outside cairn-system; change its spec, or create it again`},
		{name: "an administrator's", namespace: "cairn-system", annotations: annotations,
			actingAs: &cairnv1.ScheduleRequester{Username: junior, UID: "u2", Since: since},
			want:     `(?m)^Acts as:\s+system:serviceaccount:team-a:junior, since .* \(in cairn-system the operator uses its own rights, unless it acts as requesters in every namespace\)$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &cairnv1.Schedule{ObjectMeta: metav1.ObjectMeta{Namespace: tt.namespace, Name: "s1", Annotations: tt.annotations},
				Spec: cairnv1.ScheduleSpec{Schedule: "@daily"}, Status: cairnv1.ScheduleStatus{ActingAs: tt.actingAs}}
			e, out, errOut := testEnv(t, s)
			if got := run(e, "schedule", "describe", "s1", "-n", tt.namespace); got != ExitOK {
				t.Fatalf("exit %d: %s", got, errOut)
			}
			if !regexp.MustCompile(tt.want).MatchString(out.String()) {
				t.Errorf("describe does not match %s:\n%s", tt.want, out)
			}
		})
	}
}
