package controllertest

// Events and the phases a watch saw.

import (
	"slices"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func BackupEvents(namespace, name string) []eventsv1.Event {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(namespace))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Backup" && e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// EventsFor lists the events that regard a location.
func EventsFor(bsl *cairnv1.BackupStorageLocation) []eventsv1.Event {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(K8sClient.List(SuiteCtx, &list, client.InNamespace(bsl.Namespace))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == bsl.Name && e.Regarding.Kind == "BackupStorageLocation" {
			out = append(out, e)
		}
	}
	return out
}

// EventReasons lists the reasons of a backup's events.
func EventReasons(name string) []string {
	GinkgoHelper()
	var reasons []string
	for _, e := range BackupEvents(OperatorNamespace, name) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// PhaseRecorder records every phase a backup passes through, from a watch.
type PhaseRecorder struct {
	mu     sync.Mutex
	phases map[string][]cairnv1.BackupPhase
	// firsts holds each backup as first seen in each phase.
	firsts map[string]*cairnv1.Backup
}

func RecordPhases() *PhaseRecorder {
	GinkgoHelper()
	p := &PhaseRecorder{phases: map[string][]cairnv1.BackupPhase{}, firsts: map[string]*cairnv1.Backup{}}
	w, err := WatchClient().Watch(SuiteCtx, &cairnv1.BackupList{}, client.InNamespace(OperatorNamespace))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			b, ok := ev.Object.(*cairnv1.Backup)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			p.mu.Lock()
			seen := p.phases[b.Name]
			if len(seen) == 0 || seen[len(seen)-1] != b.Status.Phase {
				p.phases[b.Name] = append(seen, b.Status.Phase)
			}
			if key := b.Name + "/" + string(b.Status.Phase); p.firsts[key] == nil {
				p.firsts[key] = b
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// first is the backup as first seen in phase, or nil.
func (p *PhaseRecorder) First(name string, phase cairnv1.BackupPhase) *cairnv1.Backup {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firsts[name+"/"+string(phase)]
}

func (p *PhaseRecorder) Of(name string) []cairnv1.BackupPhase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.phases[name])
}
