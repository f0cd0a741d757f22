// Package openapitest holds batchhttp's checks against openapi.json that
// need an OpenAPI library (kin-openapi): that the document is valid
// OpenAPI 3.1, and that every answer batchhttp's tests get, and every
// webhook delivery, matches it. It is a module of its own, so that the
// root module, which a host requires, does not require kin-openapi. It
// has no API; its tests are all it is.
package openapitest
