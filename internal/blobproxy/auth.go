package blobproxy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Authenticator says who presents a bearer token. A token it does not accept, or whose user
// may not use the proxy, gives an error wrapping ErrRefused; any other error is a failure to
// check (the API server unreachable, say), answered 503 so that the client tries again.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (user string, err error)
}

// DefaultNodeAgentUser is the node agent's ServiceAccount in the chart's default install.
const DefaultNodeAgentUser = "system:serviceaccount:cairn-system:cairn-node-agent"

// maxTokenCacheTTL bounds how long an accepted token is trusted without asking again: a
// deleted ServiceAccount or pod loses its access within it.
const maxTokenCacheTTL = time.Minute

// maxCachedTokens bounds the cache; beyond it the cache starts over. Node agents are one per
// node, each with one token at a time (two while it rotates).
const maxCachedTokens = 4096

// TokenReviewAuthenticator accepts the tokens the API server's TokenReview accepts for
// Audience and whose user is one of Users. Accepted tokens are remembered (by their SHA-256,
// never in clear) for at most a minute, so a busy agent costs the API server one review a
// minute, not one a request. Refused tokens are not remembered.
type TokenReviewAuthenticator struct {
	client   kubernetes.Interface
	audience string
	users    []string
	ttl      time.Duration
	clock    clock.PassiveClock

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cachedToken
}

type cachedToken struct {
	user    string
	expires time.Time
}

// NewTokenReviewAuthenticator returns an authenticator asking c's TokenReviews, for the
// audience, accepting only users (full usernames, as system:serviceaccount:NS:NAME).
func NewTokenReviewAuthenticator(c kubernetes.Interface, audience string, users ...string) *TokenReviewAuthenticator {
	return &TokenReviewAuthenticator{
		client: c, audience: audience, users: users, ttl: maxTokenCacheTTL, clock: clock.RealClock{},
		cache: map[[sha256.Size]byte]cachedToken{},
	}
}

// WithClock sets the clock (tests) and returns a.
func (a *TokenReviewAuthenticator) WithClock(c clock.PassiveClock) *TokenReviewAuthenticator {
	a.clock = c
	return a
}

// Authenticate implements Authenticator.
func (a *TokenReviewAuthenticator) Authenticate(ctx context.Context, token string) (string, error) {
	if token == "" {
		return "", fmt.Errorf("%w: no token", ErrRefused)
	}
	key := sha256.Sum256([]byte(token))
	now := a.clock.Now()
	a.mu.Lock()
	if c, ok := a.cache[key]; ok && now.Before(c.expires) {
		a.mu.Unlock()
		return c.user, nil
	}
	a.mu.Unlock()

	review, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("checking the token with a TokenReview: %w", err)
	}
	user, err := a.decide(review.Status)
	if err != nil {
		return "", err
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= maxCachedTokens {
		clear(a.cache)
	}
	a.cache[key] = cachedToken{user: user, expires: now.Add(min(a.ttl, maxTokenCacheTTL))}
	return user, nil
}

// decide is the verdict on a TokenReview's status.
func (a *TokenReviewAuthenticator) decide(st authenticationv1.TokenReviewStatus) (string, error) {
	switch {
	case !st.Authenticated:
		msg := st.Error
		if msg == "" {
			msg = "not authenticated"
		}
		return "", fmt.Errorf("%w: the token was not accepted: %s", ErrRefused, msg)
	case !slices.Contains(st.Audiences, a.audience):
		// The API server answers with the requested audiences the token is valid for.
		return "", fmt.Errorf("%w: the token is not meant for audience %s", ErrRefused, a.audience)
	case !slices.Contains(a.users, st.User.Username):
		return "", fmt.Errorf("%w: user %s may not use the blob proxy", ErrRefused, st.User.Username)
	}
	return st.User.Username, nil
}
