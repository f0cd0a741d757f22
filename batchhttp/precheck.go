package batchhttp

import (
	"context"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// MaxURLBytes is the longest target URL that [PrecheckURL] accepts.
const MaxURLBytes = batchnet.MaxURLBytes

// PrecheckURL is a ready [PrecheckFunc]: [batchnet.Precheck], the no-DNS
// half of the guard whose other half a fetcher plugs into its dialer
// ([batchnet.Guard.Control]), so that the two never disagree. It refuses,
// with a "blocked: <reason>" error that never repeats the URL, a URL longer
// than [MaxURLBytes] or one that does not parse; a scheme other than http
// or https, a URL without a host, or one with user info; a port other than
// 80 or 443; "localhost" and names under ".localhost"; an IP literal in a
// special-purpose range ([batchnet.Classify]), zoned literals and the IPv6
// forms that embed an IPv4 address included; and a host that ends in a
// number but is not a canonical IP literal (127.1, 2130706433, example.123),
// which resolvers may read as an IPv4 address. Hosts are judged with
// fullwidth forms and full stops folded to ASCII and trailing dots
// dropped, so "１２７．０．０．１", "ｌｏｃａｌｈｏｓｔ" and "localhost.." are
// refused as loopback.
//
// It is not enough on its own: a public name may resolve to a private
// address, at submit or later (DNS rebinding), and a redirect may lead
// anywhere. The fetcher must check the address it connects to.
func PrecheckURL(_ context.Context, _ batch.Caller, rawURL string) error {
	return batchnet.Precheck(rawURL)
}
