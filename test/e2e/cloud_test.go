package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv/emulator"
)

// Azure Blob Storage and Google Cloud Storage locations (DESIGN.md section 23), end to end:
// the real manager and CLI against Azurite and fake-gcs-server on 127.0.0.1, one of each for
// the whole container, started by its BeforeAll and stopped by their pids. Every spec runs
// for both providers; each has its own container or bucket, location and namespaces.
var _ = Describe("Azure and GCS locations", Ordered, ContinueOnFailure, func() {
	clouds := map[string]*cloudStore{}
	BeforeAll(func() {
		clouds[string(cairnv1.StorageProviderAzure)] = startAzureStore()
		clouds[string(cairnv1.StorageProviderGCS)] = startGCSStore()
	})

	for _, provider := range []string{string(cairnv1.StorageProviderAzure), string(cairnv1.StorageProviderGCS)} {
		Context(provider, func() {
			It("creates a location with cairn location create, backs up and restores a namespace, and deleting the backup removes every object it wrote", func() {
				cloudRoundTrip(clouds[provider])
			})
			It("shows cluster A's backup in cluster B through a ReadOnly location on the same "+bucketWord(provider)+", restores it there, and marks it DataAvailable=False there once A deletes it", func() {
				cloudDisasterRecovery(clouds[provider])
			})
			It("encrypts what it stores, decrypts downloads and restores, and refuses an archive a bucket writer moved, naming the object", func() {
				cloudEncrypted(clouds[provider])
			})
			It("refuses an archive changed by one byte in the "+bucketWord(provider)+": the download is cut before its end, the restore fails", func() {
				cloudAltered(clouds[provider])
			})
			It("completes a backup whose upload met a stopped server (SIGSTOP) once it continues (SIGCONT)", func() {
				cloudStalledUpload(clouds[provider])
			})
			It("cancels a backup while the server is stopped: it leaves InProgress at once, cleans up once the server continues, and keeps only its log", func() {
				cloudStalledCancel(clouds[provider])
			})
			It("names refused credentials in the location's status, and is Available once the Secret is right", func() {
				cloudWrongCredentials(clouds[provider])
			})
		})
	}
})

func bucketWord(provider string) string {
	if provider == string(cairnv1.StorageProviderAzure) {
		return "container"
	}
	return "bucket"
}

// cloudStore is an emulated cloud storage service of the azure or gcs provider: what a spec
// needs to make a location on it, to stop it, and to see what it holds.
type cloudStore struct {
	provider cairnv1.StorageProvider
	// endpoint is the emulator's URL for config.endpoint.
	endpoint string
	// newBucket makes an empty container (azure) or bucket (gcs).
	newBucket func(name string)
	// objects lists every object of a bucket straight through the provider's SDK.
	objects func(bucket string) ([]string, error)
	// config is a location's config for a server reached at endpoint (the emulator's or a
	// proxy's in front of it).
	config func(endpoint string) map[string]string
	// credential is what a location's credential Secret holds; wrongCredential is a refused
	// one, and refusal what the location's status says of it.
	credential, wrongCredential []byte
	refusal                     func(bucket string) string
	// pause stops the emulator's process (SIGSTOP); resume continues it (SIGCONT).
	pause, resume func()
	// isUpload tells whether r writes an object of bucket.
	isUpload func(r *http.Request, bucket string) bool
	// store opens bucket as someone holding the credentials would, without Cairn's
	// encryption: the bytes as stored.
	store func(bucket string) storage.ObjectStore
}

func startAzureStore() *cloudStore {
	GinkgoHelper()
	a := emulator.StartAzurite(GinkgoT())
	wrong := make([]byte, 64)
	_, _ = rand.Read(wrong)
	return &cloudStore{
		provider:  cairnv1.StorageProviderAzure,
		endpoint:  a.Endpoint(),
		newBucket: a.CreateContainer,
		objects:   a.Blobs,
		config: func(endpoint string) map[string]string {
			if endpoint == a.Endpoint() {
				return map[string]string{cairnv1.ConfigKeyStorageAccount: a.Account, cairnv1.ConfigKeyEndpoint: endpoint}
			}
			// A proxy's URL: path-style, the account first, as Azurite's own.
			return map[string]string{cairnv1.ConfigKeyStorageAccount: a.Account, cairnv1.ConfigKeyEndpoint: endpoint + "/" + a.Account}
		},
		credential:      []byte("AZURE_STORAGE_ACCOUNT_ACCESS_KEY=" + a.Key + "\n"),
		wrongCredential: []byte("AZURE_STORAGE_ACCOUNT_ACCESS_KEY=" + base64.StdEncoding.EncodeToString(wrong) + "\n"),
		refusal: func(bucket string) string {
			return fmt.Sprintf(`access denied to container %q at %s (AuthorizationFailure): the credentials in the location's credential secret were refused`, bucket, a.Endpoint())
		},
		pause:  a.Pause,
		resume: a.Resume,
		isUpload: func(r *http.Request, bucket string) bool {
			return r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/"+a.Account+"/"+bucket+"/")
		},
		store: func(bucket string) storage.ObjectStore {
			GinkgoHelper()
			s, err := storage.NewAzure(storage.AzureConfig{Account: a.Account, Container: bucket, Endpoint: a.Endpoint(),
				Credentials: storage.AzureCredentials{SharedKey: a.Key}})
			Expect(err).NotTo(HaveOccurred())
			return s
		},
	}
}

func startGCSStore() *cloudStore {
	GinkgoHelper()
	f := emulator.StartFakeGCS(GinkgoT())
	// fake-gcs-server takes any token: the token endpoints are what accept or refuse a key.
	tokens := emulator.StartTokenServer(GinkgoT())
	refusing := emulator.StartTokenServer(GinkgoT())
	refusing.Refuse()
	key := tokens.ServiceAccountKey(GinkgoT())
	return &cloudStore{
		provider:  cairnv1.StorageProviderGCS,
		endpoint:  f.Endpoint(),
		newBucket: f.CreateBucket,
		objects:   f.Objects,
		config: func(endpoint string) map[string]string {
			return map[string]string{cairnv1.ConfigKeyEndpoint: endpoint}
		},
		credential:      key,
		wrongCredential: refusing.ServiceAccountKey(GinkgoT()),
		refusal: func(string) string {
			return "the service account key in the location's credential secret was refused (invalid_grant): is it deleted or disabled?"
		},
		pause:  f.Pause,
		resume: f.Resume,
		isUpload: func(r *http.Request, bucket string) bool {
			return r.Method != http.MethodGet && strings.HasPrefix(r.URL.Path, "/upload/storage/v1/b/"+bucket+"/")
		},
		store: func(bucket string) storage.ObjectStore {
			GinkgoHelper()
			s, err := storage.NewGCS(storage.GCSConfig{Bucket: bucket, Endpoint: f.Endpoint(), Credentials: storage.GCSCredentials{JSON: key}})
			Expect(err).NotTo(HaveOccurred())
			return s
		},
	}
}

// location makes a storage location name of bucket (prefix "cluster") reached at endpoint,
// with its credential Secret holding credential, and removes both when the spec ends. spec
// adds fields to the location's spec (YAML lines indented by two spaces). It does not wait.
func (c *cloudStore) location(name, bucket, endpoint string, credential []byte, spec string) {
	GinkgoHelper()
	c.secret(kubectlOK, name, credential)
	DeferCleanup(func() { kubectlOK("delete", "secret", name, "-n", "cairn-system", "--ignore-not-found") })
	applyAdmin(c.locationManifest(name, bucket, endpoint, spec))
	DeferCleanup(func() { kubectlOK("delete", "backupstoragelocation", name, "-n", "cairn-system", "--ignore-not-found") })
}

// secret creates the credential Secret name (key "cloud") with kubectl run by run.
func (c *cloudStore) secret(run func(...string) string, name string, credential []byte) {
	GinkgoHelper()
	file := filepath.Join(GinkgoT().TempDir(), "cloud")
	Expect(os.WriteFile(file, credential, 0o600)).To(Succeed())
	run("create", "secret", "generic", name, "-n", "cairn-system", "--from-file=cloud="+file)
}

// locationManifest is a location name of bucket (prefix "cluster") reached at endpoint, with
// the credential Secret of the same name.
func (c *cloudStore) locationManifest(name, bucket, endpoint, spec string) string {
	var config []string
	for k, v := range c.config(endpoint) {
		config = append(config, fmt.Sprintf("%s: %q", k, v))
	}
	slices.Sort(config)
	return fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: BackupStorageLocation
metadata: {name: %s, namespace: cairn-system}
spec:
  provider: %s
  objectStorage: {bucket: %s, prefix: cluster}
  config: {%s}
  credential: {name: %s, key: cloud}
%s`, name, c.provider, bucket, strings.Join(config, ", "), name, spec)
}

// waitAvailable waits until the location is Available.
func waitLocationAvailable(name string) {
	GinkgoHelper()
	_, stderr, err := kubectl("wait", "backupstoragelocation/"+name, "-n", "cairn-system",
		"--for=jsonpath={.status.phase}=Available", "--timeout=60s")
	if err != nil {
		yaml, _, _ := kubectl("get", "backupstoragelocation", name, "-n", "cairn-system", "-o", "yaml")
		Fail(fmt.Sprintf("location %s is not Available: %s\n%s\n%s", name, stderr, yaml, managerLog()))
	}
}

// list lists bucket through the SDK, failing the spec on an error.
func (c *cloudStore) list(bucket string) []string {
	GinkgoHelper()
	names, err := c.objects(bucket)
	Expect(err).NotTo(HaveOccurred())
	return names
}

// read is an object's bytes as stored.
func (c *cloudStore) read(bucket, key string) []byte {
	GinkgoHelper()
	rc, err := c.store(bucket).Get(context.Background(), key)
	Expect(err).NotTo(HaveOccurred())
	defer rc.Close()
	data, err := io.ReadAll(rc)
	Expect(err).NotTo(HaveOccurred())
	return data
}

// cloudNamespace creates a namespace with a ConfigMap and a Secret, something to back up, and
// deletes it when the spec ends.
func cloudNamespace(ns string) {
	GinkgoHelper()
	applyAdmin(fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: %[1]s}
data: {color: blue}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: %[1]s}
stringData: {password: s3cret}
`, ns))
	DeferCleanup(func() { _, _, _ = kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found") })
}

// systemBackup creates a backup of ns in the operator's namespace into location, deleted when
// the spec ends (if the spec did not delete it).
func systemBackup(name, ns, location string) {
	GinkgoHelper()
	applyAdmin(fmt.Sprintf(`apiVersion: cairn.dev/v1alpha1
kind: Backup
metadata: {name: %s, namespace: cairn-system}
spec:
  includedNamespaces: [%s]
  storageLocation: %s
`, name, ns, location))
	DeferCleanup(func() {
		_, _, _ = kubectl("delete", "backup", name, "-n", "cairn-system", "--ignore-not-found", "--timeout=60s")
	})
}

// expectCloudRestored checks the ConfigMap and Secret of cloudNamespace in ns, with kubectl run by get.
func expectCloudRestored(get func(...string) string, ns string) {
	GinkgoHelper()
	Expect(get("get", "configmap", "settings", "-n", ns, "-o", "jsonpath={.data}")).To(MatchJSON(`{"color":"blue"}`))
	Expect(get("get", "secret", "creds", "-n", ns, "-o", "jsonpath={.data}")).To(MatchJSON(`{"password":"czNjcmV0"}`)) // base64 of s3cret
}

func cloudRoundTrip(c *cloudStore) {
	ns := "e2e-" + string(c.provider) + "-cli"
	name, bucket, backupName := ns, ns, ns+"-backup"
	c.newBucket(bucket)
	cloudNamespace(ns)

	By("creating the location with cairn location create")
	c.secret(kubectlOK, name, c.credential)
	DeferCleanup(func() { kubectlOK("delete", "secret", name, "-n", "cairn-system", "--ignore-not-found") })
	var config []string
	for k, v := range c.config(c.endpoint) {
		config = append(config, k+"="+v)
	}
	slices.Sort(config)
	out := cairnOK("location", "create", name, "--provider", string(c.provider), "--bucket", bucket, "--prefix", "cluster",
		"--config", strings.Join(config, ","), "--credential", name+"=cloud")
	Expect(out).To(ContainSubstring("Storage location " + name + " created in namespace cairn-system"))
	DeferCleanup(func() { kubectlOK("delete", "backupstoragelocation", name, "-n", "cairn-system", "--ignore-not-found") })
	waitLocationAvailable(name)

	By("backing the namespace up")
	systemBackup(backupName, ns, name)
	waitBackupPhase("cairn-system", backupName, "Completed")
	keys := storage.Layout{Prefix: "cluster"}.Backup("cairn-system", backupName)
	stored := c.list(bucket)
	Expect(stored).To(ContainElements(keys.Archive, keys.Metadata, keys.Logs))
	for _, key := range stored {
		Expect(key).To(HavePrefix(keys.Dir), "what the backup wrote is under its directory")
	}

	By("restoring it after the namespace is deleted")
	kubectlOK("delete", "namespace", ns, "--timeout=60s")
	restoreName := ns + "-restore"
	applyAdmin(fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata: {name: %s, namespace: cairn-system}\nspec: {backupName: %s}\n", restoreName, backupName))
	waitRestorePhase("cairn-system", restoreName, "Completed")
	expectCloudRestored(kubectlOK, ns)

	By("deleting the restore and the backup: the " + bucketWord(string(c.provider)) + " holds nothing of them")
	kubectlOK("delete", "restore", restoreName, "-n", "cairn-system", "--timeout=60s")
	kubectlOK("delete", "backup", backupName, "-n", "cairn-system", "--timeout=60s")
	Expect(c.list(bucket)).To(BeEmpty())
}

func cloudDisasterRecovery(c *cloudStore) {
	ns := "e2e-" + string(c.provider) + "-dr"
	location, bucket, backupName := ns, ns, ns+"-backup"
	c.newBucket(bucket)
	cloudNamespace(ns)
	c.location(location, bucket, c.endpoint, c.credential, "")
	waitLocationAvailable(location)
	b := startSecondCluster()

	By("backing up a namespace in cluster A")
	systemBackup(backupName, ns, location)
	waitBackupPhase("cairn-system", backupName, "Completed")

	By("syncing the " + bucketWord(string(c.provider)) + " into cluster B through a ReadOnly location")
	c.secret(b.kubectlOK, location, c.credential)
	b.apply(c.locationManifest(location, bucket, c.endpoint, "  accessMode: ReadOnly\n  backupSyncPeriod: 2s\n"))
	b.wait("backup/"+backupName, "cairn-system", "jsonpath={.status.phase}=Completed", "60s")
	Expect(b.kubectlOK("get", "backup", backupName, "-n", "cairn-system", "-o",
		`jsonpath={.metadata.annotations.cairn\.dev/synced-from} {.status.storageLocation} {.spec.includedNamespaces[0]}`)).
		To(Equal(location + " " + location + " " + ns))

	By("restoring it in cluster B")
	b.apply(fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata: {name: %s, namespace: cairn-system}\nspec: {backupName: %s}\n", ns, backupName))
	b.wait("restore/"+ns, "cairn-system", "jsonpath={.status.phase}=Completed", "120s")
	expectCloudRestored(b.kubectlOK, ns)

	By("deleting the backup in cluster A, which deletes its data: cluster B marks it DataAvailable=False")
	kubectlOK("delete", "backup", backupName, "-n", "cairn-system", "--timeout=60s")
	b.wait("backup/"+backupName, "cairn-system", "condition="+cairnv1.BackupConditionDataAvailable+"=false", "60s")
	Expect(b.kubectlOK("get", "backup", backupName, "-n", "cairn-system", "-o",
		`jsonpath={.status.conditions[?(@.type=="DataAvailable")].reason}`)).To(Equal(cairnv1.ReasonNotFoundInStorage))
	keys := storage.Layout{Prefix: "cluster"}.Backup("cairn-system", backupName)
	for _, key := range c.list(bucket) {
		Expect(key).NotTo(HavePrefix(keys.Dir), "left of the deleted backup")
	}
}

func cloudEncrypted(c *cloudStore) {
	prefix := "e2e-" + string(c.provider) + "-enc"
	teamA, teamB, location, bucket := prefix+"-a", prefix+"-b", prefix, prefix
	c.newBucket(bucket)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyFile := filepath.Join(GinkgoT().TempDir(), "k1")
	Expect(os.WriteFile(keyFile, key, 0o600)).To(Succeed())
	kubectlOK("create", "secret", "generic", location+"-keys", "-n", "cairn-system", "--from-file=k1="+keyFile)
	DeferCleanup(func() { kubectlOK("delete", "secret", location+"-keys", "-n", "cairn-system") })
	c.location(location, bucket, c.endpoint, c.credential, fmt.Sprintf("  encryption: {keySecretRef: {name: %s-keys}, writeKey: k1}\n", location))
	waitLocationAvailable(location)

	By("backing up two team namespaces into the encrypted location, each as its lead")
	createCairnEditorRole()
	leads := map[string]string{}
	for _, ns := range []string{teamA, teamB} {
		cloudNamespace(ns)
		leads[ns] = tenant(ns, "lead", "e2e-namespace-admin")
		applyAs(leads[ns], backupManifest(ns, "nightly", "storageLocation: "+location))
		DeferCleanup(func() {
			_, _, _ = kubectl("delete", "restores,backups", "--all", "-n", ns, "--timeout=60s")
		})
	}
	for _, ns := range []string{teamA, teamB} {
		waitBackupPhase(ns, "nightly", "Completed")
	}
	layout := storage.Layout{Prefix: "cluster"}
	archiveA, archiveB := layout.Backup(teamA, "nightly").Archive, layout.Backup(teamB, "nightly").Archive

	By("finding only ciphertext in the " + bucketWord(string(c.provider)) + ": no gzip archive, no value of the namespace")
	for _, stored := range c.list(bucket) {
		data := c.read(bucket, stored)
		Expect(data).NotTo(HavePrefix("\x1f\x8b"), "%s is stored as gzip", stored)
		Expect(bytes.Contains(data, []byte("settings"))).To(BeFalse(), "%s holds plaintext", stored)
	}

	By("downloading team-b's backup with cairn: the manager's download server decrypts it")
	saved := filepath.Join(GinkgoT().TempDir(), "nightly.tar.gz")
	got := cairnWith(leads[teamB], "backup", "download", "nightly", "-n", teamB, "-o", saved)
	Expect(got.code).To(Equal(0), got.stderr)
	Expect(tarEntries(saved)).To(ContainElement("resources/configmaps/namespaces/" + teamB + "/settings.json"))

	By("a bucket writer copies team-b's archive over team-a's")
	Expect(c.store(bucket).Put(context.Background(), archiveA, bytes.NewReader(c.read(bucket, archiveB)))).To(Succeed())

	By("refusing team-a's download of the moved archive, naming the object, and saving nothing")
	refused := filepath.Join(GinkgoT().TempDir(), "moved.tar.gz")
	got = cairnWith(leads[teamA], "backup", "download", "nightly", "-n", teamA, "-o", refused)
	Expect(got.code).NotTo(Equal(0), got.stdout)
	// Named by its key within the location: a team's member is not told the location's prefix.
	named := storage.Layout{}.Backup(teamA, "nightly").Archive
	Expect(got.stderr).To(ContainSubstring("decrypting " + named + ":"))
	Expect(got.stderr).NotTo(ContainSubstring(archiveA))
	Expect(got.stderr).To(ContainSubstring("moved or copied here"))
	Expect(refused).NotTo(BeAnExistingFile())

	By("refusing team-a's restore of the moved archive, naming the object, and restoring nothing")
	kubectlOK("delete", "configmap", "settings", "-n", teamA)
	applyAs(leads[teamA], fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata: {name: back, namespace: %s}\nspec: {backupName: nightly}\n", teamA))
	waitRestorePhase(teamA, "back", "Failed")
	Expect(kubectlOK("get", "restore", "back", "-n", teamA, "-o", "jsonpath={.status.failureReason}")).To(ContainSubstring("decrypting " + named + ":"))
	_, _, err := kubectl("get", "configmap", "settings", "-n", teamA)
	Expect(err).To(HaveOccurred(), "nothing of team-b's archive is restored into team-a")
}

func cloudAltered(c *cloudStore) {
	ns := "e2e-" + string(c.provider) + "-altered"
	location, bucket := ns, ns
	c.newBucket(bucket)
	c.location(location, bucket, c.endpoint, c.credential, "")
	waitLocationAvailable(location)
	cloudNamespace(ns)
	// Random bytes do not compress: an archive well over the download server's 64 KiB reads.
	noise := make([]byte, 300<<10)
	_, _ = rand.Read(noise)
	file := filepath.Join(GinkgoT().TempDir(), "noise")
	Expect(os.WriteFile(file, []byte(base64.StdEncoding.EncodeToString(noise)), 0o600)).To(Succeed())
	kubectlOK("create", "configmap", "noise", "-n", ns, "--from-file=noise="+file)
	createCairnEditorRole()
	lead := tenant(ns, "lead", "e2e-namespace-admin")
	applyAs(lead, backupManifest(ns, "altered", "storageLocation: "+location))
	DeferCleanup(func() { _, _, _ = kubectl("delete", "restores,backups", "--all", "-n", ns, "--timeout=60s") })
	waitBackupPhase(ns, "altered", "Completed")

	By("a bucket writer flips one bit near the archive's end")
	archive := storage.Layout{Prefix: "cluster"}.Backup(ns, "altered").Archive
	data := c.read(bucket, archive)
	Expect(len(data)).To(BeNumerically(">", 256<<10))
	data[len(data)-100] ^= 1
	Expect(c.store(bucket).Put(context.Background(), archive, bytes.NewReader(data))).To(Succeed())

	By("cairn backup download fails, saving nothing")
	saved := filepath.Join(GinkgoT().TempDir(), "altered.tar.gz")
	got := cairnWith(lead, "backup", "download", "altered", "-n", ns, "-o", saved)
	Expect(got.code).NotTo(Equal(0))
	Expect(got.stderr).To(ContainSubstring("the download ended before its end"))
	Expect(saved).NotTo(BeAnExistingFile())

	By("the restore fails on the checksum, and restores nothing")
	kubectlOK("delete", "configmap", "settings", "-n", ns)
	applyAs(lead, fmt.Sprintf("apiVersion: cairn.dev/v1alpha1\nkind: Restore\nmetadata: {name: back, namespace: %s}\nspec: {backupName: altered}\n", ns))
	waitRestorePhase(ns, "back", "Failed")
	Expect(kubectlOK("get", "restore", "back", "-n", ns, "-o", "jsonpath={.status.failureReason}")).To(ContainSubstring("archive checksum mismatch"))
	_, _, err := kubectl("get", "configmap", "settings", "-n", ns)
	Expect(err).To(HaveOccurred(), "nothing of the altered archive is restored")
}
