// Package natsconf starts the embedded NATS server Salvage runs on by default
// and builds client connections to it or to an existing deployment.
//
// Everything NATS-specific about where the server lives and how to reach it
// is here; the layers above take a *nats.Conn and never look at URLs.
package natsconf
