package podvolume

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cairnv1 "github.com/cairn-backup/cairn/api/v1alpha1"
)

// ErrNoPassword is wrapped by Get's error when the repository has no password yet: nothing was
// ever copied into it from this cluster (a second cluster needs the Secret copied over).
var ErrNoPassword = errors.New("the repository has no password")

// Passwords are the volume repositories' passwords: one Secret in the operator's namespace,
// one key per repository (RepositoryReference.Key). The manager creates a password at the
// repository's first use; the node agents may read that one Secret and no other. Losing the
// Secret loses the volume data: kopia encrypts it with a key derived from the password.
type Passwords struct {
	// Client writes the Secret (Ensure); Reader reads it, Client when nil (the node agent has
	// only a Reader: it may get that one Secret, and not list or watch Secrets as a cache would).
	Client    client.Client
	Reader    client.Reader
	Namespace string
	// Secret is the Secret's name.
	Secret string
}

// Get returns the repository's password.
func (p *Passwords) Get(ctx context.Context, repo cairnv1.RepositoryReference) (string, error) {
	var s corev1.Secret
	err := p.reader().Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Secret}, &s)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%w: Secret %s/%s does not exist", ErrNoPassword, p.Namespace, p.Secret)
	}
	if err != nil {
		return "", fmt.Errorf("reading the repository passwords (Secret %s/%s): %w", p.Namespace, p.Secret, err)
	}
	pw := s.Data[repo.Key()]
	if len(pw) == 0 {
		return "", fmt.Errorf("%w: Secret %s/%s has no key %s", ErrNoPassword, p.Namespace, p.Secret, repo.Key())
	}
	return string(pw), nil
}

// Ensure returns the repository's password, making one (32 random bytes) if it has none. Two
// managers racing settle on one: creates and updates are conditional, and the loser reads the
// winner's.
func (p *Passwords) Ensure(ctx context.Context, repo cairnv1.RepositoryReference) (string, error) {
	var password string
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		var s corev1.Secret
		err := p.reader().Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Secret}, &s)
		missing := apierrors.IsNotFound(err)
		if err != nil && !missing {
			return err
		}
		if pw, err := cairnPassword(&s, repo.Key()); err != nil || pw != "" {
			password = pw
			return err
		}
		fresh, err := newPassword()
		if err != nil {
			return err
		}
		if missing {
			s = corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: p.Secret, Namespace: p.Namespace,
					Labels: map[string]string{"app.kubernetes.io/part-of": "cairn"}},
				Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{repo.Key(): []byte(fresh)},
			}
			if err := p.Client.Create(ctx, &s); err != nil {
				return err
			}
			password = fresh
			return nil
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[repo.Key()] = []byte(fresh)
		if err := p.Client.Update(ctx, &s); err != nil { // conditional on the resourceVersion read
			return err
		}
		password = fresh
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("making the password of repository %s (Secret %s/%s): %w", repo.Key(), p.Namespace, p.Secret, err)
	}
	return password, nil
}

// cairnPassword is the password Cairn made for the repository key in the passwords Secret s,
// "" when it has none. A password copied there from a Velero location (CopyVelero: a velero
// location of the same name as this one, deleted since) is an error: a repository Cairn makes
// is never encrypted with Velero's password, often Velero's published default.
func cairnPassword(s *corev1.Secret, key string) (string, error) {
	pw := s.Data[key]
	if len(pw) == 0 {
		return "", nil
	}
	if slices.Contains(strings.Split(s.Annotations[VeleroPasswordsAnnotation], ","), key) {
		return "", fmt.Errorf("the key %s holds the password of a Velero repository, copied for a velero location of that name: Cairn does not make a repository with it (once no velero location of that name is left, remove the key and its entry in the Secret's annotation %s)",
			key, VeleroPasswordsAnnotation)
	}
	return string(pw), nil
}

// VeleroPasswordsAnnotation on the passwords Secret lists, comma-separated, the keys whose
// password was copied from a Velero location's spec.velero.repositoryPasswordSecretRef
// (CopyVelero): only those may be replaced by another copy.
const VeleroPasswordsAnnotation = "cairn.dev/velero-repositories"

// CopyVelero keeps the password of a Velero repository (read by the manager from the Secret
// its location names) under the repository's key, where the node agents, which may read this
// Secret and no other, find it. It never replaces a password Cairn made: that would lose the
// key to the data of a repository of the same name.
func (p *Passwords) CopyVelero(ctx context.Context, repo cairnv1.RepositoryReference, password string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s corev1.Secret
		err := p.reader().Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Secret}, &s)
		if apierrors.IsNotFound(err) {
			s = corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: p.Secret, Namespace: p.Namespace,
					Labels: map[string]string{"app.kubernetes.io/part-of": "cairn"}},
				Type: corev1.SecretTypeOpaque,
			}
			if _, err := copyVeleroPassword(&s, repo.Key(), password); err != nil {
				return err
			}
			err = p.Client.Create(ctx, &s)
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("secrets"), p.Secret, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		changed, err := copyVeleroPassword(&s, repo.Key(), password)
		if err != nil || !changed {
			return err
		}
		return p.Client.Update(ctx, &s) // conditional on the resourceVersion read
	})
	if err != nil {
		return fmt.Errorf("keeping the password of Velero's repository %s (Secret %s/%s): %w", repo.Key(), p.Namespace, p.Secret, err)
	}
	return nil
}

// copyVeleroPassword sets key to password in the passwords Secret s, recording key as a
// Velero copy; changed says whether s changed. A different password under key that is not a
// Velero copy is an error: Cairn made it, and it is never replaced.
func copyVeleroPassword(s *corev1.Secret, key, password string) (changed bool, err error) {
	copies := s.Annotations[VeleroPasswordsAnnotation]
	var listed []string
	if copies != "" {
		listed = strings.Split(copies, ",")
	}
	isCopy := slices.Contains(listed, key)
	if old, ok := s.Data[key]; ok && len(old) > 0 {
		switch {
		case string(old) == password && isCopy:
			return false, nil
		case !isCopy:
			return false, fmt.Errorf("the key %s already holds the password of a repository Cairn made: a velero location cannot share its name with a location whose volume data Cairn copied", key)
		}
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[key] = []byte(password)
	if !isCopy {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		listed = append(listed, key)
		slices.Sort(listed)
		s.Annotations[VeleroPasswordsAnnotation] = strings.Join(listed, ",")
	}
	return true, nil
}

func (p *Passwords) reader() client.Reader {
	if p.Reader != nil {
		return p.Reader
	}
	return p.Client
}

func newPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
