package location

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

func TestNested(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s3 := func(name string, age int, endpoint, bucket, prefix string) cairnv1.BackupStorageLocation {
		return cairnv1.BackupStorageLocation{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))},
			Spec: cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderS3, Config: map[string]string{cairnv1.ConfigKeyEndpoint: endpoint},
				ObjectStorage: &cairnv1.ObjectStorage{Bucket: bucket, Prefix: prefix}},
		}
	}
	azure := func(name string, age int, account, container, prefix string) cairnv1.BackupStorageLocation {
		l := s3(name, age, "", container, prefix)
		l.Spec.Provider = cairnv1.StorageProviderAzure
		l.Spec.Config[cairnv1.ConfigKeyStorageAccount] = account
		return l
	}
	fs := func(name string, age int, dir, prefix string) cairnv1.BackupStorageLocation {
		l := cairnv1.BackupStorageLocation{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))},
			Spec:       cairnv1.BackupStorageLocationSpec{Provider: cairnv1.StorageProviderFilesystem, Config: map[string]string{cairnv1.ConfigKeyPath: dir}},
		}
		if prefix != "" {
			l.Spec.ObjectStorage = &cairnv1.ObjectStorage{Prefix: prefix}
		}
		return l
	}
	tests := []struct {
		name  string
		older cairnv1.BackupStorageLocation
		newer cairnv1.BackupStorageLocation
		want  bool
	}{
		{name: "same bucket and prefix", older: s3("a", 0, "http://s3:9000", "b", "p"), newer: s3("n", 1, "http://s3:9000", "b", "p"), want: true},
		{name: "prefix inside the other", older: s3("a", 0, "http://s3:9000", "b", "p"), newer: s3("n", 1, "http://s3:9000", "b", "p/q"), want: true},
		{name: "the other inside the prefix", older: s3("a", 0, "http://s3:9000", "b", "p/q"), newer: s3("n", 1, "http://s3:9000", "b", "p"), want: true},
		{name: "an empty prefix holds everything", older: s3("a", 0, "http://s3:9000", "b", ""), newer: s3("n", 1, "http://s3:9000", "b", "p"), want: true},
		{name: "a prefix that only starts the same", older: s3("a", 0, "http://s3:9000", "b", "p"), newer: s3("n", 1, "http://s3:9000", "b", "pq")},
		{name: "slashes do not hide a nest", older: s3("a", 0, "http://s3:9000", "b", "/p/"), newer: s3("n", 1, "http://s3:9000", "b", "p/q/"), want: true},
		{name: "another bucket", older: s3("a", 0, "http://s3:9000", "b", "p"), newer: s3("n", 1, "http://s3:9000", "c", "p")},
		{name: "another endpoint", older: s3("a", 0, "http://s3:9000", "b", "p"), newer: s3("n", 1, "http://other:9000", "b", "p")},
		{name: "the same endpoint spelled with a slash", older: s3("a", 0, "http://S3:9000/", "b", "p"), newer: s3("n", 1, "http://s3:9000", "b", "p"), want: true},
		{name: "filesystem: same directory", older: fs("a", 0, "/data", ""), newer: fs("n", 1, "/data", ""), want: true},
		{name: "filesystem: a directory inside the other's", older: fs("a", 0, "/data", ""), newer: fs("n", 1, "/data/team", ""), want: true},
		{name: "filesystem: a prefix that makes the same directory", older: fs("a", 0, "/data/team", ""), newer: fs("n", 1, "/data", "team"), want: true},
		{name: "filesystem: sibling directories", older: fs("a", 0, "/data/a", ""), newer: fs("n", 1, "/data/ab", "")},
		{name: "azure: the same container of another storage account", older: azure("a", 0, "acct1", "b", "p"), newer: azure("n", 1, "acct2", "b", "p")},
		{name: "azure: the same container of the same account", older: azure("a", 0, "acct1", "b", "p"), newer: azure("n", 1, "acct1", "b", "p/q"), want: true},
		{name: "gcs and s3 buckets of the same name are not one", older: s3("a", 0, "", "b", "p"), newer: func() cairnv1.BackupStorageLocation {
			l := s3("n", 1, "", "b", "p")
			l.Spec.Provider = cairnv1.StorageProviderGCS
			return l
		}()},
		{name: "the older one is never refused for the newer", older: s3("n", 1, "http://s3:9000", "b", "p"), newer: s3("a", 0, "http://s3:9000", "b", "p")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Nested([]cairnv1.BackupStorageLocation{tt.older, tt.newer}, &tt.newer)
			if (len(got) > 0) != tt.want {
				t.Errorf("Nested = %v, want nested %v", got, tt.want)
			}
			if tt.want && got[0] != tt.older.Name {
				t.Errorf("Nested = %v, want it to name %s", got, tt.older.Name)
			}
		})
	}
}
