package proxy

// withHooks is a newHarness option that gives the proxy tests' handles
// on its data path.
func withHooks(hk *testHooks) func(*Options) {
	return func(o *Options) { o.hooks = hk }
}
