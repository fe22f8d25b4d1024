// A minimal Android app running bnc-deploy exports three ways: LiteRT (.tflite), ONNX Runtime (.ort) and the
// dependency-free Java predictor (.bnc). Not built in bnc-deploy's CI: see README.md.
pluginManagement {
    repositories {
        google()
        mavenCentral()
        gradlePluginPortal()
    }
}

dependencyResolutionManagement {
    repositoriesMode.set(RepositoriesMode.FAIL_ON_PROJECT_REPOS)
    repositories {
        google()        // LiteRT (com.google.ai.edge.litert)
        mavenCentral()  // ONNX Runtime (com.microsoft.onnxruntime)
    }
}

rootProject.name = "bnc-deploy-android-sample"
include(":app")

// The Java predictor of this repository (clients/java), compiled from source as a plain Java library.
include(":bnc-predictor")
project(":bnc-predictor").projectDir = file("../../clients/java")
