package dataprotection

import "sync"

// Application is the protector root of one ASP.NET application: what
// IDataProtectionProvider.CreateProtector(purpose) gives inside that app,
// whose provider is already scoped to its application discriminator
// (DataProtectionOptions.ApplicationDiscriminator, SetApplicationName). An
// empty discriminator adds no purpose, as in ASP.NET. Safe for concurrent
// use; protectors are built once per purpose.
type Application struct {
	ring *Ring
	base []string
	prot sync.Map // purpose -> *Protector
}

// Application returns the ring seen by the application with the given
// discriminator.
func (r *Ring) Application(discriminator string) *Application {
	a := &Application{ring: r}
	if discriminator != "" {
		a.base = []string{discriminator}
	}
	return a
}

// Protector is the app's CreateProtector(purpose).
func (a *Application) Protector(purpose string) *Protector {
	if p, ok := a.prot.Load(purpose); ok {
		return p.(*Protector)
	}
	p, _ := a.prot.LoadOrStore(purpose, a.ring.Protector(append(append([]string(nil), a.base...), purpose)...))
	return p.(*Protector)
}

// Protect is Protector(purpose).Protect(plaintext).
func (a *Application) Protect(purpose string, plaintext []byte) ([]byte, error) {
	return a.Protector(purpose).Protect(plaintext)
}

// Unprotect is Protector(purpose).Unprotect(data).
func (a *Application) Unprotect(purpose string, data []byte) ([]byte, error) {
	return a.Protector(purpose).Unprotect(data)
}

// DefaultKeyID names the key Protect uses now, "" when there is none.
func (a *Application) DefaultKeyID() string {
	if k := a.ring.DefaultKey(); k != nil {
		return k.ID.String()
	}
	return ""
}

// Ring is the application's key ring.
func (a *Application) Ring() *Ring { return a.ring }
