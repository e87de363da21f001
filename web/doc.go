// Package web is Trident's management HTTP API (RabbitMQ-compatible shapes),
// served on the management port (15672). It reads the broker through small
// interfaces it defines, so it knows no protocol front end.
//
// So far it serves what clients' own test suites need: /api/whoami,
// /api/overview and /api/connections (list, and DELETE to close one with
// 320 CONNECTION_FORCED, honouring the X-Reason header). The full API and
// the UI are the management issue's.
package web
