package download

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cairn-backup/cairn/internal/controller/stores"
	"github.com/cairn-backup/cairn/internal/download"
)

// StartServer binds the download server at bindAddress (--download-bind-address; "" or "0"
// runs none) and adds it to mgr, which serves on every replica; it returns the signer of its
// URLs and the base clients reach it by (urlBase, or http://<the bound address> when ""), nil
// and "" without a server. Without signingKey the key is new in every process: a URL works only
// on the replica that signed it, until it restarts. The callers of URLs made for a requester
// are told apart by TokenReviews (tokenReviewer).
func StartServer(mgr ctrl.Manager, bindAddress, urlBase string, signingKey []byte, clk clock.Clock, st stores.Stores) (*download.Signer, string, error) {
	if bindAddress == "" || bindAddress == "0" {
		return nil, "", nil
	}
	var signer *download.Signer
	var err error
	if signingKey != nil {
		signer, err = download.NewSigner(signingKey)
	} else {
		signer, err = download.NewRandomSigner()
	}
	if err != nil {
		return nil, "", err
	}
	srv, err := download.Listen(bindAddress, urlBase)
	if err != nil {
		return nil, "", err
	}
	srv.Signer, srv.Open, srv.Clock = signer, st.OpenForDownload, clk
	srv.Authenticate = tokenReviewer(mgr.GetClient())
	srv.Log = mgr.GetLogger().WithName("download")
	if err := mgr.Add(srv); err != nil {
		return nil, "", fmt.Errorf("adding the download server: %w", err)
	}
	return signer, srv.Base(), nil
}

// tokenReviewer says whose a caller's bearer token is by a TokenReview for the API server's
// own audiences: the token a person's kubeconfig gives kubectl. (The blob proxy's
// authenticator admits a fixed list of node agents with tokens of its own audience, and
// remembers them; a download is one review, matched against the URL's requester.)
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
func tokenReviewer(c client.Client) download.Authenticator {
	return func(ctx context.Context, token string) (download.Requester, bool, error) {
		review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
		if err := c.Create(ctx, review); err != nil {
			return download.Requester{}, false, fmt.Errorf("checking the token with a TokenReview: %w", err)
		}
		if !review.Status.Authenticated {
			return download.Requester{}, false, nil
		}
		return download.Requester{Username: review.Status.User.Username, UID: review.Status.User.UID}, true, nil
	}
}
