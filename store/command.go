package store

import "github.com/tether-proxy/tether/store/command"

// The commands, their log entry format and the command sets members gossip
// are package command's; the store takes and names them as its own, so its
// callers need one import.
type (
	Command       = command.Command
	InstallKey    = command.InstallKey
	ActivateKey   = command.ActivateKey
	RevokeKey     = command.RevokeKey
	PruneKeys     = command.PruneKeys
	SetDrain      = command.SetDrain
	ClearDrain    = command.ClearDrain
	SetClusterID  = command.SetClusterID
	SetClock      = command.SetClock
	AcmeWrite     = command.AcmeWrite
	AcmeEntry     = command.AcmeEntry
	ClusterSecret = command.ClusterSecret
	SetConfig     = command.SetConfig
	CommandSet    = command.CommandSet
)

// Operations of a ClusterSecret command.
const (
	SecretInstall = command.SecretInstall
	SecretUse     = command.SecretUse
	SecretRemove  = command.SecretRemove
)

// BaselineCommands is what a member that advertises no set applies.
const BaselineCommands = command.BaselineCommands

// Commands is the set this binary applies.
var Commands = command.Commands

// BindRequest is the binding of a client's request to its request id
// (command.BindRequest).
func BindRequest(method, path string, body []byte) string {
	return command.BindRequest(method, path, body)
}

// Requirement names the command type and body version cmd is written as,
// e.g. "SetDrain v1".
func Requirement(cmd Command) string { return command.Requirement(cmd) }
