package cairn_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cairn-backup/cairn/internal/metrics"
)

// dashboardFile is the dashboard the chart ships; docs/dashboard.json is the same file.
const dashboardFile = "files/grafana/cairn-dashboard.json"

// grafanaVariables are the dashboard's variables that stand for a range or a value in a query;
// PromQL cannot parse them, so they are replaced by what Grafana would put there.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// metricNames is every metric name expr reads, parsed as PromQL.
func metricNames(expr string) ([]string, error) {
	e, err := parser.ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, nil
}

// checkQuery says what is wrong with a query: it does not parse, reads no metric, or names a
// metric the manager does not register (internal/metrics.Names).
func checkQuery(expr string, registered []string) error {
	names, err := metricNames(expr)
	if err != nil {
		return fmt.Errorf("%q does not parse: %w", expr, err)
	}
	if len(names) == 0 {
		return fmt.Errorf("%q reads no metric", expr)
	}
	for _, n := range names {
		if !slices.Contains(registered, n) {
			return fmt.Errorf("%q reads %s, which the manager does not register", expr, n)
		}
	}
	return nil
}

// TestCheckQuery: the check catches a renamed metric, a typo and a query that does not parse.
func TestCheckQuery(t *testing.T) {
	registered := metrics.Names()
	for expr, want := range map[string]string{
		`sum by (schedule) (increase(cairn_backup_success_total[$__rate_interval]))`:                 "",
		`histogram_quantile(0.95, sum by (le) (rate(cairn_backup_duration_seconds_bucket[5m])))`:     "",
		`cairn_schedule_seconds_since_last_success > 1.5 * cairn_schedule_expected_interval_seconds`: "",
		`rate(cairn_backup_successes_total[5m])`:                                                     "cairn_backup_successes_total, which the manager does not register",
		`cairn_backup_duration_seconds > 0`:                                                          "cairn_backup_duration_seconds, which the manager does not register",
		`sum(cairn_backups{phase="Completed"}`:                                                       "does not parse",
		`vector(1)`:                                                                                  "reads no metric",
	} {
		err := checkQuery(expr, registered)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", expr, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error with %q", expr, err, want)
		}
	}
}

// dashboardPanel is what the test reads of a Grafana panel.
type dashboardPanel struct {
	ID         int    `json:"id"`
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// TestDashboardQueriesReadRegisteredMetrics parses every query of the dashboard (panels and
// variables) and checks each metric it reads is one the manager registers, so the dashboard
// cannot silently rot when a metric is renamed.
func TestDashboardQueriesReadRegisteredMetrics(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, docs) {
		t.Errorf("docs/dashboard.json differs from charts/cairn/%s: copy it", dashboardFile)
	}
	var dashboard struct {
		UID        string           `json:"uid"`
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dashboard); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	registered := metrics.Names()
	queries := 0
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q does not read the dashboard's data source variable", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				queries++
				if err := checkQuery(q.Expr, registered); err != nil {
					t.Errorf("panel %q: %v", p.Title, err)
				}
			}
		}
	}
	walk(dashboard.Panels)
	for _, v := range dashboard.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		text, _ := q["query"].(string)
		inner, ok := strings.CutPrefix(text, "label_values(")
		selector, _, found := strings.Cut(inner, ",")
		if !ok || !found {
			t.Errorf("variable %s: %q is not label_values(metric, label)", v.Name, text)
			continue
		}
		queries++
		if err := checkQuery(selector, registered); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
	if queries < 20 {
		t.Errorf("only %d queries found in the dashboard: is the test reading it right?", queries)
	}
}

// TestDashboardConfigMap: with metrics.dashboard.enabled the chart ships the file, unchanged,
// in a ConfigMap with the label Grafana's sidecar looks for; off by default.
func TestDashboardConfigMap(t *testing.T) {
	if strings.Contains(render(t), "cairn-dashboard.json") {
		t.Error("the dashboard is rendered by default")
	}
	docs := documents(t, render(t, "metrics.dashboard.enabled=true", "metrics.dashboard.namespace=monitoring"))
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(docs["ConfigMap/cairn-dashboard"], &cm); err != nil {
		t.Fatalf("ConfigMap cairn-dashboard: %v", err)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != "monitoring" {
		t.Errorf("labels %v, namespace %s; want grafana_dashboard=1 in monitoring", cm.Labels, cm.Namespace)
	}
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["cairn-dashboard.json"]; got != strings.TrimSpace(string(data)) {
		t.Errorf("the ConfigMap's dashboard differs from %s", dashboardFile)
	}
}

// TestPrometheusRule parses every alert's expression and checks its metrics, as for the
// dashboard; the rule is off by default.
func TestPrometheusRule(t *testing.T) {
	if strings.Contains(render(t), "kind: PrometheusRule") {
		t.Error("the PrometheusRule is rendered by default")
	}
	docs := documents(t, render(t, "metrics.prometheusRule.enabled=true"))
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Expr        string            `json:"expr"`
					For         string            `json:"for"`
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(docs["PrometheusRule/cairn"], &rule); err != nil {
		t.Fatalf("PrometheusRule cairn: %v", err)
	}
	registered := metrics.Names()
	var alerts []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if err := checkQuery(r.Expr, registered); err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: no severity or summary", r.Alert)
			}
		}
	}
	want := []string{"CairnScheduleOverdue", "CairnBackupFailed", "CairnBackupPartiallyFailed", "CairnStorageLocationUnavailable", "CairnBackupDeletionFailing"}
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// TestPrometheusRuleAlertsFire runs the chart's alerts in Prometheus's own rule engine
// (`promtool test rules`, testdata/prometheusrule.test.yaml): an overdue schedule fires
// CairnScheduleOverdue while an on-time and a paused one do not, and so on for each alert. It
// needs promtool: $PROMTOOL (the Makefile installs it, hack/promtool.sh), else the Makefile's
// pinned one in bin/, and fails when it is missing.
func TestPrometheusRuleAlertsFire(t *testing.T) {
	promtool, err := filepath.Abs(binary(t, "PROMTOOL", "promtool-2.42.0+ds-5+deb12u1", "promtool"))
	if err != nil {
		t.Fatal(err)
	}
	docs := documents(t, render(t, "metrics.prometheusRule.enabled=true"))
	var rule struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(docs["PrometheusRule/cairn"], &rule); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "prometheusrule.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"rules.yaml": rules, "test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
