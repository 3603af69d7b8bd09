package cli

import (
	"bytes"
	"context"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// testEnv is an env with buffers for streams, the fixed clock, namespace team-a and a fake
// API client holding objs, whose tables a fake API server answers (serveTables).
func testEnv(t *testing.T, objs ...client.Object) (*env, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := newEnv(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	e.clock = clocktesting.NewFakeClock(now)
	e.output = "table"
	e.operatorNamespace = DefaultOperatorNamespace
	ns := "team-a"
	e.flags.Namespace = &ns
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithRESTMapper(restMapper(t)).WithObjects(objs...).
		WithStatusSubresource(objs...).Build()
	e.newClient = func() (client.WithWatch, error) { return c, nil }
	serveTables(t, e)
	e.interrupt = context.WithCancel
	return e, &out, &errOut
}
