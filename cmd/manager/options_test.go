package main

import (
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string // substring; empty means no error
		check   func(t *testing.T, o options)
	}{
		{
			name: "defaults",
			args: nil,
			check: func(t *testing.T, o options) {
				if o.namespace != "cairn-system" || o.concurrentBackups != 1 || o.itemBlockWorkerCount != 4 {
					t.Errorf("defaults = %+v", o)
				}
				if o.concurrentRestores != 1 || o.restoreWorkerCount != 8 || len(o.priorities) == 0 || o.priorities[0] != "namespaces" {
					t.Errorf("restore defaults = %+v", o)
				}
				if o.defaultBackupTTL != 720*time.Hour {
					t.Errorf("default backup ttl = %s, want 720h", o.defaultBackupTTL)
				}
				if o.backupSyncPeriod != time.Minute {
					t.Errorf("backup sync period = %s, want 1m", o.backupSyncPeriod)
				}
				if o.downloadAddr != ":8086" || o.downloadURLBase != "" {
					t.Errorf("download defaults = %q %q, want :8086 and none", o.downloadAddr, o.downloadURLBase)
				}
				if o.maxEntryBytes != 16<<20 {
					t.Errorf("max archive entry size = %d, want 16Mi", o.maxEntryBytes)
				}
				if !o.hooksEnabled || o.defaultHookTimeout != 30*time.Second {
					t.Errorf("hooks enabled = %v, default hook timeout = %s, want true and 30s", o.hooksEnabled, o.defaultHookTimeout)
				}
				if o.actAsRequester != "team-namespaces" {
					t.Errorf("act as requester = %q, want team-namespaces", o.actAsRequester)
				}
				if o.metricsAddr != ":8080" || o.probeAddr != ":8081" || o.pprofAddr != "0" || o.leaderElect || o.kubeconfig != "" {
					t.Errorf("defaults = %+v", o)
				}
			},
		},
		{
			name: "every flag set",
			args: []string{"--namespace=backups", "--concurrent-backups=3", "--item-block-worker-count=8",
				"--kubeconfig=/tmp/kc", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:9",
				"--pprof-bind-address=127.0.0.1:6060", "--leader-elect", "--queue-resync-period=5s", "--item-operation-sync-frequency=3s",
				"--retry-backoff-min=2s", "--retry-backoff-max=20s", "--storage-timeout=9s", "--phase-timeout=2h",
				"--concurrent-restores=2", "--restore-worker-count=16", "--restore-resource-priorities=namespaces,configmaps,deployments.apps",
				"--restore-namespace-timeout=1m", "--restore-scratch-dir=/scratch", "--default-backup-ttl=24h",
				"--backup-sync-period=0s",
				"--download-bind-address=127.0.0.1:9086", "--download-url-base=https://downloads.example.com/cairn",
				"--download-signing-key-file=/keys/download", "--act-as-requester=all-namespaces", "--max-archive-entry-size=32Mi",
				"--repository-server-bind-address=:9445", "--node-agent-service-account=agents", "--repository-password-secret=repo-pw",
				"--repository-server-tls-secret=repo-tls", "--repository-server-service=repo",
				"--repository-maintenance-interval=2h", "--repository-maintenance-timeout=10m", "--restore-helper-image=cairn/manager:1.0",
				"--hooks-enabled=false", "--default-hook-timeout=2m"},
			check: func(t *testing.T, o options) {
				want := options{namespace: "backups", concurrentBackups: 3, itemBlockWorkerCount: 8,
					kubeconfig: "/tmp/kc", metricsAddr: "0", probeAddr: "127.0.0.1:9", pprofAddr: "127.0.0.1:6060", leaderElect: true,
					queueResyncPeriod: 5 * time.Second, operationSync: 3 * time.Second,
					backoffMin: 2 * time.Second, backoffMax: 20 * time.Second, storageTimeout: 9 * time.Second,
					phaseTimeout: 2 * time.Hour, concurrentRestores: 2, restoreWorkerCount: 16,
					restorePriorities: "namespaces,configmaps,deployments.apps", priorities: []string{"namespaces", "configmaps", "deployments.apps"},
					restoreNamespaceWait: time.Minute, restoreScratchDir: "/scratch", defaultBackupTTL: 24 * time.Hour,
					downloadAddr: "127.0.0.1:9086", downloadURLBase: "https://downloads.example.com/cairn", downloadKeyFile: "/keys/download",
					actAsRequester: "all-namespaces", maxEntrySize: "32Mi", maxEntryBytes: 32 << 20,
					repositoryAddr: ":9445", nodeAgentSA: "agents", passwordSecret: "repo-pw",
					repositoryTLSSecret: "repo-tls", repositoryService: "repo",
					maintenanceInterval: 2 * time.Hour, maintenanceTimeout: 10 * time.Minute, restoreHelperImage: "cairn/manager:1.0",
					hooksEnabled: false, defaultHookTimeout: 2 * time.Minute}
				o.zap, want.zap = zap.Options{}, zap.Options{}
				if !reflect.DeepEqual(o, want) {
					t.Errorf("got %+v, want %+v", o, want)
				}
			},
		},
		{name: "zero concurrent backups", args: []string{"--concurrent-backups=0"}, wantErr: "invalid value 0 for --concurrent-backups: must be at least 1"},
		{name: "negative concurrent backups", args: []string{"--concurrent-backups", "-2"}, wantErr: "--concurrent-backups: must be at least 1"},
		{name: "concurrent backups not a number", args: []string{"--concurrent-backups=two"}, wantErr: "-concurrent-backups"},
		{name: "zero workers", args: []string{"--item-block-worker-count=0"}, wantErr: "invalid value 0 for --item-block-worker-count: must be at least 1"},
		{name: "bad namespace", args: []string{"--namespace=Not_A_Namespace"}, wantErr: `invalid value "Not_A_Namespace" for --namespace`},
		{name: "empty namespace", args: []string{"--namespace="}, wantErr: "--namespace"},
		{name: "zero resync period", args: []string{"--queue-resync-period=0s"}, wantErr: "invalid value 0s for --queue-resync-period: must be greater than zero"},
		{name: "zero operation sync", args: []string{"--item-operation-sync-frequency=0s"}, wantErr: "--item-operation-sync-frequency: must be greater than zero"},
		{name: "zero storage timeout", args: []string{"--storage-timeout=0s"}, wantErr: "invalid value 0s for --storage-timeout: must be greater than zero"},
		{name: "zero backoff", args: []string{"--retry-backoff-min=0s"}, wantErr: "invalid value 0s for --retry-backoff-min: must be greater than zero"},
		{name: "backoff max below min", args: []string{"--retry-backoff-min=30s", "--retry-backoff-max=10s"}, wantErr: "invalid value 10s for --retry-backoff-max: must be at least --retry-backoff-min (30s)"},
		{name: "negative backup sync period", args: []string{"--backup-sync-period=-1s"}, wantErr: "invalid value -1s for --backup-sync-period: must be 0s (off) or more"},
		{name: "zero default backup ttl", args: []string{"--default-backup-ttl=0s"}, wantErr: "invalid value 0s for --default-backup-ttl: must be greater than zero"},
		{name: "negative default backup ttl", args: []string{"--default-backup-ttl=-1h"}, wantErr: "--default-backup-ttl: must be greater than zero"},
		{name: "zero default hook timeout", args: []string{"--default-hook-timeout=0s"}, wantErr: "invalid value 0s for --default-hook-timeout: must be from 1s to 1h"},
		{name: "a default hook timeout of a day", args: []string{"--default-hook-timeout=24h"}, wantErr: "--default-hook-timeout: must be from 1s to 1h"},
		{name: "zero phase timeout", args: []string{"--phase-timeout=0s"}, wantErr: "invalid value 0s for --phase-timeout: must be greater than zero"},
		{name: "zero concurrent restores", args: []string{"--concurrent-restores=0"}, wantErr: "invalid value 0 for --concurrent-restores: must be at least 1"},
		{name: "zero restore workers", args: []string{"--restore-worker-count=0"}, wantErr: "invalid value 0 for --restore-worker-count: must be at least 1"},
		{name: "zero namespace wait", args: []string{"--restore-namespace-timeout=0s"}, wantErr: "--restore-namespace-timeout: must be greater than zero"},
		{name: "empty priority", args: []string{"--restore-resource-priorities=namespaces,,pods"}, wantErr: `invalid value "namespaces,,pods" for --restore-resource-priorities`},
		{name: "no priorities", args: []string{"--restore-resource-priorities="}, wantErr: "--restore-resource-priorities"},
		{name: "download URL base without a scheme", args: []string{"--download-url-base=cairn:8086"}, wantErr: `invalid value "cairn:8086" for --download-url-base`},
		{name: "download URL base with a query", args: []string{"--download-url-base=http://cairn:8086/?a=b"}, wantErr: "--download-url-base: must be an http or https URL without a query"},
		{name: "unknown requester rule", args: []string{"--act-as-requester=nowhere"}, wantErr: `invalid value "nowhere" for --act-as-requester: must be team-namespaces or all-namespaces`},
		{name: "entry size not a quantity", args: []string{"--max-archive-entry-size=big"}, wantErr: `invalid value "big" for --max-archive-entry-size`},
		{name: "entry size too small", args: []string{"--max-archive-entry-size=1Ki"}, wantErr: "must be a quantity of at least 1Mi"},
		{name: "zero maintenance interval", args: []string{"--repository-maintenance-interval=0s"}, wantErr: "invalid value 0s for --repository-maintenance-interval: must be greater than zero"},
		{name: "zero maintenance timeout", args: []string{"--repository-maintenance-timeout=0s"}, wantErr: "--repository-maintenance-timeout: must be greater than zero"},
		{name: "bad password secret", args: []string{"--repository-password-secret=Bad_Name"}, wantErr: `invalid value "Bad_Name" for --repository-password-secret`},
		{name: "unknown flag", args: []string{"--concurrency=2"}, wantErr: "concurrency"},
		{name: "stray argument", args: []string{"run"}, wantErr: `unexpected argument "run"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error is not one line: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			tt.check(t, o)
		})
	}
}

func TestHelp(t *testing.T) {
	if _, err := parseOptions([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help gave %v, want flag.ErrHelp", err)
	}
	text := usage()
	for _, f := range []string{"-namespace", "-concurrent-backups", "-item-block-worker-count", "-kubeconfig",
		"-metrics-bind-address", "-health-probe-bind-address", "-leader-elect"} {
		if !strings.Contains(text, f) {
			t.Errorf("usage does not mention %s", f)
		}
	}
}

func TestParseNodeAgentOptions(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	good := []string{"--node-name=node-a", "--repository-server=http://cairn-repository.cairn-system.svc:8445"}
	o, err := parseNodeAgentOptions(good)
	if err != nil {
		t.Fatal(err)
	}
	if o.node != "node-a" || o.podsDir != "/var/lib/kubelet/pods" || o.namespace != "cairn-system" || o.passwordSecret != "cairn-repository-passwords" || o.restoreParallel != 2 ||
		o.maxCopies != 2 || o.emptyDirBytes != 50<<30 {
		t.Fatalf("options = %+v", o)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no node", []string{"--repository-server=http://x:1"}, "--node-name (or $NODE_NAME) is required"},
		{"bad node", append([]string{"--node-name=Node_A"}, good[1:]...), `invalid value "Node_A" for --node-name`},
		{"no repository server", []string{"--node-name=node-a"}, `invalid value "" for --repository-server`},
		{"repository server without a scheme", []string{"--node-name=node-a", "--repository-server=cairn:8445"}, "must be an http or https URL"},
		{"relative pods dir", append([]string{"--pods-dir=pods"}, good...), `invalid value "pods" for --pods-dir`},
		{"no restore parallelism", append([]string{"--restore-parallelism=0"}, good...), "invalid value 0 for --restore-parallelism: must be from 1 to 64"},
		{"no copy at once", append([]string{"--max-concurrent-copies=0"}, good...), "invalid value 0 for --max-concurrent-copies: must be from 1 to 64"},
		{"a capacity that is not a quantity", append([]string{"--empty-dir-restore-capacity=lots"}, good...), `invalid value "lots" for --empty-dir-restore-capacity`},
		{"a negative capacity", append([]string{"--empty-dir-restore-capacity=-1Gi"}, good...), `invalid value "-1Gi" for --empty-dir-restore-capacity`},
		{"stray argument", append(good, "run"), `unexpected argument "run"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseNodeAgentOptions(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	t.Setenv("NODE_NAME", "node-b")
	if o, err := parseNodeAgentOptions(good[1:]); err != nil || o.node != "node-b" {
		t.Fatalf("NODE_NAME: %+v, %v", o, err)
	}
}
