package cairn_test

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// admits is the policy's decision (Kubernetes' NetworkPolicy semantics, ingress only) on a
// connection to port of a pod it selects: from a pod of its namespace with podLabels, or from
// address ip (podLabels nil).
func admits(p networkingv1.NetworkPolicySpec, port int32, podLabels labels.Set, ip string) bool {
	for _, rule := range p.Ingress {
		if !slices.ContainsFunc(rule.Ports, func(pp networkingv1.NetworkPolicyPort) bool { return pp.Port != nil && pp.Port.IntVal == port }) {
			continue
		}
		for _, peer := range rule.From {
			switch {
			case peer.PodSelector != nil && peer.NamespaceSelector == nil && podLabels != nil:
				if selects(peer.PodSelector.MatchLabels, podLabels) && len(peer.PodSelector.MatchExpressions) == 0 {
					return true
				}
			case peer.IPBlock != nil && ip != "":
				if inCIDR(peer.IPBlock.CIDR, ip) && len(peer.IPBlock.Except) == 0 {
					return true
				}
			}
		}
	}
	return false
}

// inCIDR reports whether ip is in cidr.
func inCIDR(cidr, ip string) bool {
	prefix, err := netip.ParsePrefix(cidr)
	addr, aerr := netip.ParseAddr(ip)
	return err == nil && aerr == nil && prefix.Contains(addr)
}

func ports(ps ...int32) []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for _, p := range ps {
		port := intstr.FromInt32(p)
		out = append(out, networkingv1.NetworkPolicyPort{Port: &port})
	}
	return out
}

func keys(docs map[string][]byte) []string { return slices.Sorted(maps.Keys(docs)) }

func TestAdmits(t *testing.T) {
	spec := networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16"}}}, Ports: ports(8080)},
	}}
	tests := []struct {
		port int32
		ip   string
		want bool
	}{
		{port: 8080, ip: "10.0.3.4", want: true},
		{port: 8080, ip: "10.1.3.4"},
		{port: 8081, ip: "10.0.3.4"},
	}
	for _, tt := range tests {
		if got := admits(spec, tt.port, nil, tt.ip); got != tt.want {
			t.Errorf("admits(%d, %s) = %v, want %v", tt.port, tt.ip, got, tt.want)
		}
	}
}

// TestNetworkPolicy: off by default; on, the manager's blob proxy port admits the node agents'
// pods and no other pod or address, and its other ports (and the agents') only the ranges of
// the values.
func TestNetworkPolicy(t *testing.T) {
	if docs := documents(t, render(t)); slices.ContainsFunc(keys(docs), func(k string) bool { return strings.HasPrefix(k, "NetworkPolicy/") }) {
		t.Error("a NetworkPolicy rendered by default")
	}
	docs := documents(t, render(t, "networkPolicy.enabled=true", "networkPolicy.apiServerCIDRs[0]=192.168.0.0/24",
		"networkPolicy.prometheusCIDRs[0]=10.8.0.0/24", "networkPolicy.downloadCIDRs[0]=10.10.0.0/24"))
	var d appsv1.Deployment
	var ds appsv1.DaemonSet
	var manager, agent networkingv1.NetworkPolicy
	if !decodeDoc(t, docs, "Deployment/cairn", &d) || !decodeDoc(t, docs, "DaemonSet/cairn-node-agent", &ds) ||
		!decodeDoc(t, docs, "NetworkPolicy/cairn-manager", &manager) || !decodeDoc(t, docs, "NetworkPolicy/cairn-node-agent", &agent) {
		t.Fatalf("rendered %v", keys(docs))
	}
	managerPods, agentPods := labels.Set(d.Spec.Template.Labels), labels.Set(ds.Spec.Template.Labels)
	if !selects(manager.Spec.PodSelector.MatchLabels, managerPods) || selects(manager.Spec.PodSelector.MatchLabels, agentPods) ||
		!selects(agent.Spec.PodSelector.MatchLabels, agentPods) || selects(agent.Spec.PodSelector.MatchLabels, managerPods) {
		t.Errorf("selectors: manager %v, agent %v", manager.Spec.PodSelector, agent.Spec.PodSelector)
	}
	for _, p := range []networkingv1.NetworkPolicy{manager, agent} {
		if !slices.Equal(p.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("%s: policyTypes %v, want Ingress only", p.Name, p.Spec.PolicyTypes)
		}
	}
	tenant := labels.Set{"app": "shop"}
	tests := []struct {
		name   string
		policy networkingv1.NetworkPolicySpec
		port   int32
		pod    labels.Set
		ip     string
		want   bool
	}{
		{name: "a node agent to the blob proxy", policy: manager.Spec, port: 8445, pod: agentPods, want: true},
		{name: "a tenant's pod to the blob proxy", policy: manager.Spec, port: 8445, pod: tenant},
		{name: "the manager to the blob proxy", policy: manager.Spec, port: 8445, pod: managerPods},
		{name: "an address to the blob proxy", policy: manager.Spec, port: 8445, ip: "192.168.0.5"},
		{name: "Prometheus to the metrics", policy: manager.Spec, port: 8080, ip: "10.8.0.9", want: true},
		{name: "a node to the metrics", policy: manager.Spec, port: 8080, ip: "192.168.0.5"},
		{name: "a node agent to the metrics", policy: manager.Spec, port: 8080, pod: agentPods},
		{name: "a kubelet to the probes", policy: manager.Spec, port: 8081, ip: "192.168.0.5", want: true},
		{name: "Prometheus to the probes", policy: manager.Spec, port: 8081, ip: "10.8.0.9"},
		{name: "an ingress to the downloads", policy: manager.Spec, port: 8086, ip: "10.10.0.3", want: true},
		{name: "a tenant's pod to the downloads", policy: manager.Spec, port: 8086, pod: tenant},
		{name: "Prometheus to an agent's metrics", policy: agent.Spec, port: 8082, ip: "10.8.0.9", want: true},
		{name: "a kubelet to an agent's probes", policy: agent.Spec, port: 8083, ip: "192.168.0.5", want: true},
		{name: "a tenant's pod to an agent", policy: agent.Spec, port: 8082, pod: tenant},
	}
	for _, tt := range tests {
		if got := admits(tt.policy, tt.port, tt.pod, tt.ip); got != tt.want {
			t.Errorf("%s (port %d): admitted %v, want %v", tt.name, tt.port, got, tt.want)
		}
	}

	// No range given: nothing but the agents reaches the manager.
	docs = documents(t, render(t, "networkPolicy.enabled=true"))
	if !decodeDoc(t, docs, "NetworkPolicy/cairn-manager", &manager) {
		t.Fatal("no NetworkPolicy cairn-manager")
	}
	if len(manager.Spec.Ingress) != 1 || !admits(manager.Spec, 8445, agentPods, "") {
		t.Errorf("without ranges: ingress %+v, want the node agents' rule alone", manager.Spec.Ingress)
	}
}
