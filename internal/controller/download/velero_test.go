package download_test

import (
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/cairn-backup/cairn/internal/controller/controllertest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
	"github.com/cairn-backup/cairn/internal/controller"
	"github.com/cairn-backup/cairn/internal/storage"
	"github.com/cairn-backup/cairn/internal/testenv"
)

// A Velero location on S3 cannot hand out presigned URLs (the keys Cairn asks for are not the
// bucket's): its files are served by the manager's download server, under Cairn's names, the
// results in Cairn's shape.
var _ = Describe("Downloads of a Velero backup", func() {
	It("serves its log, contents and results through the download server", func() {
		server := testenv.StartS3Server(GinkgoT())
		server.CreateBucket("velero")
		CreateCredentialSecret("dl-velero", server.CredentialsFile())
		upload, err := storage.NewS3(storage.S3Config{Bucket: "velero", Endpoint: server.Endpoint(), ForcePathStyle: true,
			Credentials: storage.S3Credentials{AccessKeyID: server.AccessKey, SecretAccessKey: server.SecretKey}})
		Expect(err).NotTo(HaveOccurred())
		root := filepath.Join(testenv.RepoRoot(), "testdata", "velero", "bucket")
		Expect(filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			rel, _ := filepath.Rel(root, path)
			return upload.Put(SuiteCtx, filepath.ToSlash(rel), f)
		})).To(Succeed())
		spec := S3Spec(server, "velero", "dl-velero")
		spec.ObjectStorage.Prefix = "velero"
		spec.Format, spec.AccessMode = cairnv1.LocationFormatVelero, cairnv1.AccessModeReadOnly
		spec.BackupSyncPeriod = &metav1.Duration{Duration: time.Second}
		bsl := CreateLocation(spec)
		stop := StartManager(controller.Config{Controllers: []string{"downloadrequest", "storagelocation", "sync"}, DownloadBindAddress: "127.0.0.1:0"})
		DeferCleanup(func() {
			_ = K8sClient.Delete(SuiteCtx, bsl)
			stop()
			DeleteAllBackups()
		})
		EventuallySynced(OperatorNamespace, "shop-broken")

		dr := request(OperatorNamespace, cairnv1.DownloadTargetBackupResults, "shop-broken")
		Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseProcessed), dr.Status.Message)
		Expect(dr.Status.DownloadURL).NotTo(HavePrefix(server.Endpoint()), "not a presigned URL of the bucket")
		status, body := httpGet(dr.Status.DownloadURL)
		Expect(status).To(Equal(http.StatusOK))
		Expect(gunzip(body)).To(ContainSubstring(`"item":"velero/broken/-"`))

		for _, kind := range []cairnv1.DownloadTargetKind{cairnv1.DownloadTargetBackupLog, cairnv1.DownloadTargetBackupContents} {
			dr := request(OperatorNamespace, kind, "shop-broken")
			Expect(dr.Status.Phase).To(Equal(cairnv1.DownloadRequestPhaseProcessed), "%s: %s", kind, dr.Status.Message)
			status, body := httpGet(dr.Status.DownloadURL)
			Expect(status).To(Equal(http.StatusOK), string(kind))
			Expect(body).NotTo(BeEmpty())
		}
	})
})

func gunzip(s string) string {
	GinkgoHelper()
	gz, err := gzip.NewReader(strings.NewReader(s))
	Expect(err).NotTo(HaveOccurred())
	data, err := io.ReadAll(gz)
	Expect(err).NotTo(HaveOccurred())
	return string(data)
}
