// Package uitest drives the admin page (/ui/) of a three-node cluster of the
// built binary in a real Chromium (TestUIInARealBrowser; `make
// ui-screenshots` refreshes docs/img/ui-*.png with it). It lives in the
// tools module so that the product's go.mod does not require chromedp. It
// has no code.
package uitest
