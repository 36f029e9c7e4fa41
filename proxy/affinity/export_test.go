package affinity

// SetSessionSealBudget lets external tests exhaust the per-key budget of
// session seals; the returned func restores it.
func SetSessionSealBudget(n uint64) (restore func()) {
	old := sessionSealBudget
	sessionSealBudget = n
	return func() { sessionSealBudget = old }
}
