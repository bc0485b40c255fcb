# The xce image: one static binary on a distroless base, run as a non-root
# user, the data dir a volume. `make image` builds it (docker or podman).
# docs/operations.md, "Running on Kubernetes", shows how it is run.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY third_party ./third_party
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
ARG DATE=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}" \
      -o /out/xce ./cmd/xce \
 && mkdir -p /out/var/lib/xce /out/run/xce

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/xce /xce
COPY --from=build --chown=65532:65532 /out/var/lib/xce /var/lib/xce
COPY --from=build --chown=65532:65532 /out/run/xce /run/xce
USER 65532:65532
VOLUME ["/var/lib/xce"]
EXPOSE 7101 7201
ENTRYPOINT ["/xce"]
CMD ["server", "--config", "/run/xce/node.yaml"]
