// Package web is Trident's management HTTP API, with RabbitMQ 3.10's paths,
// JSON field names, status codes and tag rules (so rabbitmqadmin, client
// test suites and scripts work), and its Prometheus /metrics. It reads the
// broker through interfaces it defines (Core, Connections) and knows no
// protocol front end.
//
// Files: routes.go lists every endpoint and the tag it needs; authz.go the
// access rules; list.go paging, filtering and sorting; rates.go the
// sampler behind message rates; metrics.go the Prometheus collector;
// definitions.go definitions.json export and import (also used at boot);
// oauth.go "Authorization: Bearer" OAuth 2 tokens (checked by auth like
// basic credentials, then the same tag rules) and GET /api/auth for the
// UI's OAuth 2 login.
// Vhost descriptions and tags are kept in memory only.
package web
