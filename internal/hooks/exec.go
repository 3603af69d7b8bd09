package hooks

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// +kubebuilder:rbac:groups="",resources=pods/exec,verbs=create

// RemoteExecutor runs commands through the API server's pods/exec, over a websocket, or SPDY
// where the websocket upgrade is refused (as kubectl exec does), with the manager's identity.
type RemoteExecutor struct {
	config *rest.Config
	client rest.Interface
}

// NewRemoteExecutor returns an executor that execs with cfg.
func NewRemoteExecutor(cfg *rest.Config) (*RemoteExecutor, error) {
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &RemoteExecutor{config: cfg, client: clientset.CoreV1().RESTClient()}, nil
}

// Exec runs command in container of pod; ctx ending closes the stream.
func (e *RemoteExecutor) Exec(ctx context.Context, namespace, pod, container string, command []string, stdout, stderr io.Writer) error {
	req := e.client.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	websocket, err := remotecommand.NewWebSocketExecutor(e.config, "GET", req.URL().String())
	if err != nil {
		return fmt.Errorf("preparing the websocket exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(e.config, "POST", req.URL())
	if err != nil {
		return fmt.Errorf("preparing the SPDY exec: %w", err)
	}
	executor, err := remotecommand.NewFallbackExecutor(websocket, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
}
