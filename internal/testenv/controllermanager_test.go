package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestControllerManager runs kube-controller-manager against a real API server and shows that
// each controller does, for a test, what it does in a cluster. Without it the namespace would
// stay Terminating, the dependent would stay, and no ServiceAccount would appear.
func TestControllerManager(t *testing.T) {
	env, err := New()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cm, err := StartControllerManager(t, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-controller-manager log: %s\n%s", cm.LogPath, cm.logTail())
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const timeout = time.Minute

	t.Run("a deleted namespace is finalized and goes away with its objects", func(t *testing.T) {
		g := NewWithT(t)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}
		g.Expect(c.Create(ctx, ns)).To(Succeed())
		data := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns.Name}, Data: map[string]string{"k": "v"}}
		g.Expect(c.Create(ctx, data)).To(Succeed())

		g.Expect(c.Delete(ctx, ns)).To(Succeed())
		g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(ns), ns) }).
			WithTimeout(timeout).Should(Satisfy(apierrors.IsNotFound))
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(data), data)).To(Satisfy(apierrors.IsNotFound))
		// The name is free again, as a restore needs it.
		g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}})).To(Succeed())
	})

	t.Run("the dependent of a deleted owner is garbage-collected", func(t *testing.T) {
		g := NewWithT(t)
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: "default"}}
		g.Expect(c.Create(ctx, owner)).To(Succeed())
		dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", Namespace: "default",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
		g.Expect(c.Create(ctx, dependent)).To(Succeed())
		bystander := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bystander", Namespace: "default"}}
		g.Expect(c.Create(ctx, bystander)).To(Succeed())

		g.Expect(c.Delete(ctx, owner)).To(Succeed())
		g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(dependent), dependent) }).
			WithTimeout(timeout).Should(Satisfy(apierrors.IsNotFound))
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(bystander), bystander)).To(Succeed())
	})

	t.Run("a new namespace gets its default ServiceAccount, and a token Secret its token", func(t *testing.T) {
		g := NewWithT(t)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}
		g.Expect(c.Create(ctx, ns)).To(Succeed())
		sa := &corev1.ServiceAccount{}
		g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, sa) }).
			WithTimeout(timeout).Should(Succeed())

		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "default-token", Namespace: ns.Name,
				Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type: corev1.SecretTypeServiceAccountToken,
		}
		g.Expect(c.Create(ctx, secret)).To(Succeed())
		g.Eventually(func() ([]byte, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(secret), secret)
			return secret.Data[corev1.ServiceAccountTokenKey], err
		}).WithTimeout(timeout).ShouldNot(BeEmpty())
	})

	t.Run("Stop ends the process and may be called again", func(t *testing.T) {
		cm.Stop()
		cm.Stop()
		select {
		case <-cm.exited:
		default:
			t.Fatal("the process still runs after Stop")
		}
	})
}

func TestStartControllerManagerWithoutBinary(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := StartControllerManager(t, &envtest.Environment{})
	if err == nil || !strings.Contains(err.Error(), "run 'make envtest' first") {
		t.Fatalf("got %v, want an error asking for 'make envtest'", err)
	}
}

func TestReportsControllers(t *testing.T) {
	body := "[+]ping ok\n[+]namespace-controller ok\n[-]garbage-collector-controller failed: reason withheld\nhealthz check failed\n"
	tests := []struct {
		name        string
		controllers []string
		want        bool
	}{
		{name: "all passing", controllers: []string{"namespace-controller"}, want: true},
		{name: "one failing", controllers: []string{"namespace-controller", "garbage-collector-controller"}, want: false},
		{name: "one not registered yet", controllers: []string{"serviceaccount-controller"}, want: false},
		{name: "none asked for", controllers: nil, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reportsControllers(body, tt.controllers); got != tt.want {
				t.Errorf("reportsControllers(%v) = %v, want %v", tt.controllers, got, tt.want)
			}
		})
	}
}
