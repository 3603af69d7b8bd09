//go:build e2enode

package node

import (
	"context"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The node has neither a DNS server nor kube-proxy (hack/node-up.sh): pods reach the API server
// at 10.0.0.1 because that address is on the namespace's lo. While the suite runs, it does the
// rest of their work for the Services the specs need, from this process, which runs in the
// node's namespace:
//
//   - serveDNS answers on the node's address, the pods' nameserver (the kubelet's clusterDNS),
//     for <service>.<namespace>.svc.cluster.local with the Service's cluster IP, and NXDOMAIN
//     for any other name;
//   - serveRepositoryService puts the repository Service's cluster IP on lo and forwards each
//     connection to one of its ready endpoints, as kube-proxy's userspace mode did.
//
// So the node agents reach the manager's repository server by the name the chart gives them.

// clusterDomain is the kubelet's (hack/node-up.sh).
const clusterDomain = "svc.cluster.local"

// serveDNS answers DNS queries over UDP on the node's address until the suite ends.
func serveDNS(c client.Reader) {
	GinkgoHelper()
	conn, err := net.ListenPacket("udp", net.JoinHostPort(nodeIP, "53"))
	Expect(err).NotTo(HaveOccurred(), "listening for the pods' DNS queries")
	DeferCleanup(conn.Close)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, addr, err := conn.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			query := append([]byte(nil), buf[:n]...)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if answer, err := answerDNS(query, func(ns, name string) (string, error) { return clusterIP(ctx, c, ns, name) }); err == nil {
					_, _ = conn.WriteTo(answer, addr)
				}
			}()
		}
	}()
}

// answerDNS answers one query: the cluster IP of the Service it names (lookup), NXDOMAIN for
// a name that is not a Service's, and no answer for the other types of a Service's name.
func answerDNS(query []byte, lookup func(ns, name string) (string, error)) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	resp := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RCode: dnsmessage.RCodeNameError},
		Questions: []dnsmessage.Question{q},
	}
	if ns, name, ok := serviceOfName(q.Name.String()); ok {
		ip, err := lookup(ns, name)
		if err != nil {
			resp.RCode = dnsmessage.RCodeServerFailure
		}
		if ip4 := net.ParseIP(ip).To4(); ip4 != nil {
			resp.RCode = dnsmessage.RCodeSuccess
			if q.Type == dnsmessage.TypeA {
				resp.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
					Body:   &dnsmessage.AResource{A: [4]byte(ip4)},
				}}
			}
		}
	}
	return resp.Pack()
}

// serviceOfName is the namespace and name of the Service whose DNS name is fqdn.
func serviceOfName(fqdn string) (ns, name string, ok bool) {
	rest, ok := strings.CutSuffix(strings.ToLower(strings.TrimSuffix(fqdn, ".")), "."+clusterDomain)
	if !ok {
		return "", "", false
	}
	name, ns, ok = strings.Cut(rest, ".")
	if !ok || name == "" || ns == "" || strings.Contains(ns, ".") {
		return "", "", false
	}
	return ns, name, true
}

// clusterIP is the cluster IP of the Service ns/name, "" when it has none.
func clusterIP(ctx context.Context, c client.Reader, ns, name string) (string, error) {
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", err
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return "", nil
	}
	return svc.Spec.ClusterIP, nil
}

// serveRepositoryService forwards the connections to the cluster IP of Cairn's repository
// Service (the manager's blob proxy, which the node agents reach), on each of its ports, to its
// ready endpoints, until the current container's clean-up.
func serveRepositoryService(ctx context.Context) {
	GinkgoHelper()
	ns, name := cairnNamespace, repositoryService
	var svc corev1.Service
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc)).To(Succeed())
	ip := svc.Spec.ClusterIP
	Expect(net.ParseIP(ip)).NotTo(BeNil(), "service %s/%s has a cluster IP", ns, name)
	if out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
		Expect(string(out)).To(ContainSubstring("File exists"), "ip addr add %s/32 dev lo", ip)
	}
	DeferCleanup(func() { _ = exec.Command("ip", "addr", "del", ip+"/32", "dev", "lo").Run() })
	for _, port := range svc.Spec.Ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(int(port.Port))))
		Expect(err).NotTo(HaveOccurred())
		var (
			conns sync.WaitGroup
			open  openConns
		)
		// The connections still open are closed, not waited for: a client's idle keep-alive
		// connection (the node agent's to the repository server) would hold the clean-up for
		// its idle timeout.
		DeferCleanup(func() { _ = l.Close(); open.closeAll(); conns.Wait() })
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return // closed
				}
				conns.Go(func() {
					if open.add(conn) {
						defer open.remove(conn)
						forward(conn, ns, name, port.Name)
					}
				})
			}
		}()
	}
}

// openConns are a Service's forwarded connections still open.
type openConns struct {
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

// add tracks conn, or closes it and says false once closeAll ran.
func (o *openConns) add(conn net.Conn) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		_ = conn.Close()
		return false
	}
	if o.conns == nil {
		o.conns = map[net.Conn]bool{}
	}
	o.conns[conn] = true
	return true
}

func (o *openConns) remove(conn net.Conn) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.conns, conn)
}

// closeAll closes every open connection: each forward then ends, once its backend has seen the
// half-close that follows.
func (o *openConns) closeAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for conn := range o.conns {
		_ = conn.Close()
	}
}

// forward connects conn to a ready endpoint of the Service's port portName, and copies both
// ways until both sides are done.
func forward(conn net.Conn, ns, name, portName string) {
	defer conn.Close()
	backend := dialEndpoint(ns, name, portName)
	if backend == nil {
		return // as with a Service that has no ready endpoint: the connection is closed
	}
	defer backend.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(backend, conn)
	go pipe(conn, backend)
	<-done
	<-done
}

// dialEndpoint connects to the first ready endpoint of the Service's port portName that
// answers, from its EndpointSlices; nil when none does.
func dialEndpoint(ns, name, portName string) net.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var slices discoveryv1.EndpointSliceList
	if err := k8s.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil
	}
	for _, s := range slices.Items {
		for _, p := range s.Ports {
			if p.Port == nil || p.Name == nil || *p.Name != portName {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready || len(e.Addresses) == 0 {
					continue
				}
				addr := net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(*p.Port)))
				if c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr); err == nil {
					return c
				}
			}
		}
	}
	return nil
}
