# The image for people with Docker. It can't be built on this project's CI
# machine (no Docker engine, no registry to pull base images from): `make
# image` is the supported way, and also sets the OCI labels and both
# architectures (linux/amd64, linux/arm64).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$(cat VERSION)" -o /fleet-manager ./cmd/fleet-manager

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /fleet-manager /fleet-manager
USER 65532:65532
ENTRYPOINT ["/fleet-manager"]
CMD ["run"]
