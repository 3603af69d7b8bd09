package emulator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// AzuriteVersion is the Azure Storage emulator the tests run; the Makefile installs the same
// (npm package azurite) into bin/azurite-<version>/.
const AzuriteVersion = "3.37.0"

// AzuriteBinary is Azurite's blob service: $AZURITE, else
// bin/azurite-<version>/node_modules/.bin/azurite-blob.
func AzuriteBinary() string {
	return binaryFrom("AZURITE", "azurite-"+AzuriteVersion, "node_modules", ".bin", "azurite-blob")
}

// Azurite is Azurite's blob service on 127.0.0.1, for tests, with one storage account of its
// own (a random name and key). Its data is kept in a directory, so Stop and Start keep it.
type Azurite struct {
	// Account and Key are the storage account and its shared key (base64).
	Account string
	Key     string
	emulator
}

// StartAzurite starts Azurite on 127.0.0.1 for the test and stops it when the test ends. It
// runs with telemetry off: no test traffic leaves 127.0.0.1.
func StartAzurite(t TB) *Azurite {
	t.Helper()
	return StartAzuriteOn(t, "127.0.0.1")
}

// StartAzuriteOn is StartAzurite on another address of the machine, host: the node suite's
// pods reach the node's address, on the loopback of the suite's own network namespace.
func StartAzuriteOn(t TB, host string) *Azurite {
	t.Helper()
	key := make([]byte, 64)
	_, _ = rand.Read(key)
	a := &Azurite{Account: "cairn" + randomHex(4), Key: base64.StdEncoding.EncodeToString(key)}
	port := freePortOn(t, host)
	a.addr = net.JoinHostPort(host, strconv.Itoa(port))
	a.emulator = emulator{
		name: "azurite", addr: a.addr, binary: AzuriteBinary(), t: t, startTimeout: 90 * time.Second,
		args: []string{"--blobHost", host, "--blobPort", strconv.Itoa(port), "--location", t.TempDir(),
			"--disableTelemetry", "--silent", "--skipApiVersionCheck"},
		env: []string{"AZURITE_ACCOUNTS=" + a.Account + ":" + a.Key},
	}
	a.start()
	t.Cleanup(a.stop)
	return a
}

// Endpoint is the account's blob service URL, path-style, for config.endpoint.
func (a *Azurite) Endpoint() string { return "http://" + a.addr + "/" + a.Account }

// HostEndpoint is the account's blob service URL as Azure's are, with the account in the
// host name (http://<account>.blob.localhost:<port>): Azurite takes the account from the
// host. The name resolves only after ResolveToLoopback.
func (a *Azurite) HostEndpoint() string {
	_, port, _ := net.SplitHostPort(a.addr)
	return "http://" + a.Account + ".blob.localhost:" + port
}

// Start starts a stopped Azurite again, with its data.
func (a *Azurite) Start() { a.start() }

// Stop kills Azurite.
func (a *Azurite) Stop() { a.stop() }

// Pause stops Azurite's process (SIGSTOP); Resume continues it.
func (a *Azurite) Pause() { a.pause() }

// Resume continues a paused Azurite.
func (a *Azurite) Resume() { a.resume() }

// CreateContainer makes an empty container (one that exists already is kept).
func (a *Azurite) CreateContainer(name string) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.client().CreateContainer(ctx, name, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		a.t.Fatalf("creating container %s: %v", name, err)
	}
}

// Blobs lists the names of every blob of a container, committed or not, straight through
// Azure's SDK with the account's key: what the container holds, whoever wrote it.
func (a *Azurite) Blobs(container string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pager := a.client().NewListBlobsFlatPager(container, &azblob.ListBlobsFlatOptions{
		Include: azblob.ListBlobsInclude{UncommittedBlobs: true}})
	names := []string{}
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing container %s: %w", container, err)
		}
		for _, b := range page.Segment.BlobItems {
			names = append(names, *b.Name)
		}
	}
	return names, nil
}

// client is a client of the account, with its shared key.
func (a *Azurite) client() *azblob.Client {
	a.t.Helper()
	cred, err := azblob.NewSharedKeyCredential(a.Account, a.Key)
	if err != nil {
		a.t.Fatal(err)
	}
	client, err := azblob.NewClientWithSharedKeyCredential(a.Endpoint(), cred,
		&azblob.ClientOptions{ClientOptions: azcore.ClientOptions{InsecureAllowCredentialWithHTTP: true}})
	if err != nil {
		a.t.Fatal(err)
	}
	return client
}
