# Multi-stage build: the Go build is the tested `make build-static`; this file
# only wraps it. Produces a static, nonroot, minimal image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY third_party/ third_party/
RUN go mod download
COPY . .
RUN make build-static

FROM gcr.io/distroless/static:nonroot
COPY --from=build /src/bin/certhub-static /certhub
USER 65532:65532
ENTRYPOINT ["/certhub"]
CMD ["run"]
