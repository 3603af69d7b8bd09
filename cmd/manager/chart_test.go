package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestChartDefaultsAreTheManagers: every manager flag the Helm chart sets has the manager's own
// default in charts/cairn/values.yaml, so that installing with the chart changes nothing that
// running the binary would not.
func TestChartDefaultsAreTheManagers(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "charts", "cairn", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	var o options
	fs := newFlagSet(&o)
	for value, flagName := range map[string]string{
		"concurrentBackups":          "concurrent-backups",
		"concurrentRestores":         "concurrent-restores",
		"itemBlockWorkerCount":       "item-block-worker-count",
		"restoreWorkerCount":         "restore-worker-count",
		"defaultBackupTTL":           "default-backup-ttl",
		"queueResyncPeriod":          "queue-resync-period",
		"itemOperationSyncFrequency": "item-operation-sync-frequency",
		"storageTimeout":             "storage-timeout",
		"retryBackoffMin":            "retry-backoff-min",
		"retryBackoffMax":            "retry-backoff-max",
		"phaseTimeout":               "phase-timeout",
		"restoreNamespaceTimeout":    "restore-namespace-timeout",
		"backupSyncPeriod":           "backup-sync-period",
	} {
		f := fs.Lookup(flagName)
		if f == nil {
			t.Errorf("the chart sets --%s, which the manager does not have", flagName)
			continue
		}
		got, ok := values[value]
		if !ok {
			t.Errorf("values.yaml has no %s (--%s)", value, flagName)
			continue
		}
		switch got := got.(type) {
		case float64: // YAML numbers
			if want, err := strconv.Atoi(f.DefValue); err != nil || int(got) != want {
				t.Errorf("values.yaml %s: %v, the manager's --%s default: %s", value, got, flagName, f.DefValue)
			}
		case string:
			gotD, err1 := time.ParseDuration(got)
			wantD, err2 := time.ParseDuration(f.DefValue)
			if err1 != nil || err2 != nil || gotD != wantD {
				t.Errorf("values.yaml %s: %q, the manager's --%s default: %s", value, got, flagName, f.DefValue)
			}
		default:
			t.Errorf("values.yaml %s: %v of type %T", value, got, got)
		}
	}
	if got, want := values["logLevel"], "info"; got != want {
		t.Errorf("values.yaml logLevel: %v, want %s (zap's default)", got, want)
	}

	// The download server: on, on the manager's port, with the manager's own URL base.
	download, _ := values["downloadServer"].(map[string]any)
	if download["enabled"] != true {
		t.Errorf("values.yaml downloadServer.enabled: %v, want true (the manager serves downloads by default)", download["enabled"])
	}
	if addr := fs.Lookup("download-bind-address"); addr == nil {
		t.Error("the chart sets --download-bind-address, which the manager does not have")
	} else if got, want := fmt.Sprintf(":%v", download["port"]), addr.DefValue; got != want {
		t.Errorf("values.yaml downloadServer.port gives --download-bind-address=%s, the manager's default: %s", got, want)
	}
	if base := fs.Lookup("download-url-base"); base == nil {
		t.Error("the chart sets --download-url-base, which the manager does not have")
	} else if got := download["urlBase"]; got != base.DefValue {
		t.Errorf("values.yaml downloadServer.urlBase: %q, the manager's --download-url-base default: %q", got, base.DefValue)
	}
	if fs.Lookup("download-signing-key-file") == nil {
		t.Error("the chart sets --download-signing-key-file, which the manager does not have")
	}

	// Repository maintenance: the manager's schedule. (The repository server is the one
	// deliberate difference: the chart runs node agents, so it serves them on
	// nodeAgent.repositoryServer.port; a manager run alone serves none.)
	maintenance, _ := values["repositoryMaintenance"].(map[string]any)
	for key, flagName := range map[string]string{"interval": "repository-maintenance-interval", "timeout": "repository-maintenance-timeout"} {
		f := fs.Lookup(flagName)
		if f == nil {
			t.Errorf("the chart sets --%s, which the manager does not have", flagName)
			continue
		}
		got, err := time.ParseDuration(fmt.Sprint(maintenance[key]))
		want, _ := time.ParseDuration(f.DefValue)
		if err != nil || got != want {
			t.Errorf("values.yaml repositoryMaintenance.%s: %v, the manager's --%s default: %s", key, maintenance[key], flagName, f.DefValue)
		}
	}
	for _, flagName := range []string{"repository-server-bind-address", "node-agent-service-account", "repository-password-secret",
		"repository-server-tls-secret", "repository-server-service"} {
		if fs.Lookup(flagName) == nil {
			t.Errorf("the chart sets --%s, which the manager does not have", flagName)
		}
	}
}
