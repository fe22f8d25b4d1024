plugins {
    id("com.android.application")
}

android {
    namespace = "io.github.bncdeploy.sample"
    compileSdk = 36

    defaultConfig {
        applicationId = "io.github.bncdeploy.sample"
        minSdk = 24 // onnxruntime-android's minimum; LiteRT 1.4 and the Java predictor need less
        targetSdk = 36
        versionCode = 1
        versionName = "1.0"
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
}

dependencies {
    // Versions: see README.md ("Dependencies") for where each number comes from. None was resolved here.
    implementation("com.google.ai.edge.litert:litert:1.4.2")          // org.tensorflow.lite.Interpreter
    implementation("com.google.ai.edge.litert:litert-metadata:1.4.2") // MetadataExtractor: the labels file
    implementation("com.microsoft.onnxruntime:onnxruntime-android:1.27.0")
    implementation(project(":bnc-predictor"))                           // ../../clients/java
}
